import { PageHeader } from '../ui/components.js';

export function FleetView(_props: { query: URLSearchParams }) {
  return <PageHeader title="Fleet" />;
}
