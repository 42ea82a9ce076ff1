import { PageHeader } from '../ui/components.js';

export function EnrollmentTokensView(_props: object) {
  return <PageHeader title="Enrollment tokens" />;
}
