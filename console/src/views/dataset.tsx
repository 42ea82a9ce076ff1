import { PageHeader } from '../ui/components.js';

export function DatasetView(_props: { id: string }) {
  return <PageHeader title="Dataset" />;
}
