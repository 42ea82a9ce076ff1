import { PageHeader } from '../ui/components.js';

export function EpisodeView(_props: { id: string }) {
  return <PageHeader title="Episode" />;
}
