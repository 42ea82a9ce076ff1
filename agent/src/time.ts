// The agent's clock and scheduler are the shared ones in packages/protocol: the cloud takes the
// same kinds of time source, so both are tested by moving time, never by sleeping.
export { every, ManualScheduler, systemScheduler, type Scheduler, type TimerHandle, type TimeSource } from '@fleet/protocol';
