import { PageHeader } from '../ui/components.js';

export function EpisodesView(_props: { query: URLSearchParams }) {
  return <PageHeader title="Episodes" />;
}
