import { PageHeader } from '../ui/components.js';

export function RobotView(_props: { id: string }) {
  return <PageHeader title="Robot" />;
}
