import { PageHeader } from '../ui/components.js';

export function DatasetsView(_props: object) {
  return <PageHeader title="Datasets" />;
}
