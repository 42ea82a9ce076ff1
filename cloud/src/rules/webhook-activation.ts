/**
 * How many webhook subscriptions an organization may have active is bounded by its plan
 * (`maxActive`). A subscription is made active when it is created and when it is enabled
 * again after being disabled; disabled ones do not count. The rule for every engine: a
 * subscription already active stays so (enabling it again is no change, whatever the count);
 * any other becomes active only while the organization has fewer active ones than its bound.
 */
export type Activation = 'unchanged' | 'activate' | 'limit';

export function activation(status: 'active' | 'disabled' | 'new', activeInOrg: number, maxActive: number): Activation {
  if (status === 'active') return 'unchanged';
  return activeInOrg < maxActive ? 'activate' : 'limit';
}
