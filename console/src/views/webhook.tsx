import { PageHeader } from '../ui/components.js';

export function WebhookView(_props: { id: string }) {
  return <PageHeader title="Webhook" />;
}
