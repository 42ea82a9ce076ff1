import { PageHeader } from '../ui/components.js';

export function ApiKeysView(_props: object) {
  return <PageHeader title="API keys" />;
}
