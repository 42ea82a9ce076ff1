// @fleet/simulator: simulated robots driving the real agent. The `fleet-sim` CLI (cli.ts),
// end-to-end tests and benchmarks use these exports.
export {
  FleetError,
  FleetOptionsSchema,
  agentAsOperatorRobot,
  operatorScript,
  parseFleetOptions,
  runFleet,
  type Fleet,
  type FleetDeps,
  type FleetOptions,
  type FleetOptionsInput,
  type SimulatedRobot,
} from './fleet.js';
export {
  DEFAULT_OUTCOME_WEIGHTS,
  ScriptedOperator,
  type OperatorCounters,
  type OperatorRobot,
  type OperatorScript,
  type OperatorState,
  type OperatorSubtask,
  type OperatorTask,
  type OutcomeWeights,
  type ScriptedOperatorOptions,
} from './operator.js';
export { seededRandom, weightedPick } from './random.js';
