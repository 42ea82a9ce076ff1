import { PageHeader } from '../ui/components.js';

export function SyncView(_props: object) {
  return <PageHeader title="Sync" />;
}
