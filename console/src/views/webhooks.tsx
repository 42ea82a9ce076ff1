import { PageHeader } from '../ui/components.js';

export function WebhooksView(_props: object) {
  return <PageHeader title="Webhooks" />;
}
