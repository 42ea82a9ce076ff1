"""Receiving webhooks: ``fleet.webhooks.verify(raw_body, signature_header, secret, tolerance_s=300)``
checks a delivery's ``X-Service-Signature`` (the implementation is in ``fleet._signature``)."""

from __future__ import annotations

from ._signature import WebhookSignatureError, verify

__all__ = ["WebhookSignatureError", "verify"]
