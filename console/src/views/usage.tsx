import { PageHeader } from '../ui/components.js';

export function UsageView(_props: object) {
  return <PageHeader title="Plan and usage" />;
}
