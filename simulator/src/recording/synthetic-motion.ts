/**
 * The synthetic arm's task: a pick-and-place cycle (reach, grasp, lift, carry, place, retreat)
 * whose cube positions and pace come from the episode, the joint targets a controller commands
 * for it, and the measured joints that follow those targets with a lag. Everything is a pure
 * function of (seed, time), so a recording is the same whatever the write timing, and frames
 * and joint states agree on where the arm is.
 */

/** A point in the camera plane, metres: x to the right of the arm's base, y up from the table. */
export interface Point {
  x: number;
  y: number;
}

export type Rgb = readonly [number, number, number];

/** What the camera sees, drawn in order (later shapes on top). */
export type Shape =
  | { kind: 'segment'; a: Point; b: Point; radius: number; colour: Rgb }
  | { kind: 'disc'; c: Point; radius: number; colour: Rgb }
  | { kind: 'rect'; min: Point; max: Point; colour: Rgb };

export interface SceneDescription {
  shapes: Shape[];
  /** Between the gripper's fingertips: where the wrist camera looks. */
  gripper: Point;
}

/** One joint sample, in `JOINT_NAMES` order. */
export interface JointSample {
  /** What the controller commands (rad). */
  command: number[];
  /** Measured positions (rad), following the command with a lag. */
  position: number[];
  /** Measured velocities (rad/s). */
  velocity: number[];
  /** Measured efforts (N·m): gravity load plus the controller's correction. */
  effort: number[];
}

/** The arm, side view: shoulder on a pedestal, upper arm, forearm, gripper (m). */
const SHOULDER: Point = { x: 0, y: 0.25 };
const UPPER_ARM = 0.42;
const FOREARM = 0.38;
const HAND = 0.14;
export const CUBE_SIZE = 0.06;
const GRIP_OPEN = 0.9;
/** Fingers just touching the cube. */
const GRIP_CLOSED = 0.35;
const HOME = { x: 0.38, y: 0.42, pan: 0 };
/** Time constant of the joint position loop (s): the measured joints lag the command by about this. */
export const FOLLOW_TAU_S = 0.06;
const FOLLOW_TAPS = 12;
const FOLLOW_STEP_S = 0.02;
const FOLLOW_WEIGHTS = (() => {
  const w = Array.from({ length: FOLLOW_TAPS }, (_, k) => Math.exp((-k * FOLLOW_STEP_S) / FOLLOW_TAU_S));
  const sum = w.reduce((a, b) => a + b, 0);
  return w.map((v) => v / sum);
})();

/** A 32-bit seed from an episode id (FNV-1a). */
export function episodeSeed(id: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

/** A number in [0, 1) for (seed, k, slot): random access, so cycle k needs no earlier cycle. */
function unit(seed: number, k: number, slot: number): number {
  let h = (seed ^ Math.imul(k + 1, 0x9e3779b1) ^ Math.imul(slot + 1, 0x85ebca6b)) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return ((h ^ (h >>> 16)) >>> 0) / 2 ** 32;
}

const smoothstep = (u: number) => u * u * (3 - 2 * u);
const lerp = (a: number, b: number, u: number) => a + (b - a) * u;

interface Key {
  /** Fraction of the cycle. */
  f: number;
  /** Gripper tip, reach (m) and height (m); pan (rad); gripper (rad). */
  x: number;
  y: number;
  pan: number;
  grip: number;
}

/** The gripper holds the cube between these fractions of a cycle. */
const ATTACH_F = 0.3;
const DETACH_F = 0.78;

export class ArmTask {
  /** Length of one pick-and-place cycle (s), 8 to 12 s depending on the episode. */
  readonly cycleS: number;

  constructor(readonly seed: number) {
    this.cycleS = 8 + 4 * unit(seed, -1, 0);
  }

  /** Where the cube rests before cycle k: alternately near and far from the base. */
  private spot(k: number): { x: number; pan: number } {
    const [lo, hi] = k % 2 === 0 ? [0.3, 0.44] : [0.52, 0.66];
    return { x: lerp(lo, hi, unit(this.seed, k, 0)), pan: lerp(-0.45, 0.45, unit(this.seed, k, 1)) };
  }

  /** The last cycle's keys: a sample looks at its cycle a few dozen times. */
  private memo: { cycle: number; keys: Key[] } | undefined;

  private keys(cycle: number): Key[] {
    if (this.memo?.cycle === cycle) return this.memo.keys;
    const keys = this.makeKeys(cycle);
    this.memo = { cycle, keys };
    return keys;
  }

  private makeKeys(cycle: number): Key[] {
    const a = this.spot(cycle);
    const b = this.spot(cycle + 1);
    const rest = CUBE_SIZE / 2;
    const open = GRIP_OPEN;
    const shut = GRIP_CLOSED;
    return [
      { f: 0, ...HOME, grip: open },
      { f: 0.14, x: a.x, y: 0.25, pan: a.pan, grip: open },
      { f: 0.24, x: a.x, y: rest, pan: a.pan, grip: open },
      { f: 0.32, x: a.x, y: rest, pan: a.pan, grip: shut },
      { f: 0.44, x: a.x, y: 0.3, pan: a.pan, grip: shut },
      { f: 0.62, x: b.x, y: 0.3, pan: b.pan, grip: shut },
      { f: 0.72, x: b.x, y: rest, pan: b.pan, grip: shut },
      { f: 0.8, x: b.x, y: rest, pan: b.pan, grip: open },
      { f: 0.9, x: b.x, y: 0.25, pan: b.pan, grip: open },
      { f: 1, ...HOME, grip: open },
    ];
  }

  /** The commanded joint positions at `t` s into the episode. */
  command(t: number): number[] {
    const s = Math.max(0, t) / this.cycleS;
    const cycle = Math.floor(s);
    const f = s - cycle;
    const keys = this.keys(cycle);
    let i = 0;
    while (i < keys.length - 2 && keys[i + 1]!.f <= f) i++;
    const k0 = keys[i]!;
    const k1 = keys[i + 1]!;
    const u = smoothstep(Math.min(1, (f - k0.f) / (k1.f - k0.f)));
    const x = lerp(k0.x, k1.x, u);
    const y = lerp(k0.y, k1.y, u);
    const pan = lerp(k0.pan, k1.pan, u);
    const [lift, elbow, wrist] = inverseKinematics(x, y);
    // wrist_2 rolls a little over the cycle; wrist_3 turns the fingers square to the cube.
    return [pan, lift, elbow, wrist, 0.1 * Math.sin(2 * Math.PI * f), -pan, lerp(k0.grip, k1.grip, u)];
  }

  /** Measured positions at `t`: the command through a first-order lag (time constant FOLLOW_TAU_S). */
  position(t: number): number[] {
    const out = new Array<number>(7).fill(0);
    for (let k = 0; k < FOLLOW_TAPS; k++) {
      const c = this.command(t - k * FOLLOW_STEP_S);
      const w = FOLLOW_WEIGHTS[k]!;
      for (let j = 0; j < 7; j++) out[j]! += w * c[j]!;
    }
    return out;
  }

  sample(t: number): JointSample {
    const command = this.command(t);
    const position = this.position(t);
    const h = 0.01;
    const before = this.position(t - h);
    const velocity = position.map((p, j) => (p - before[j]!) / h);
    const [, lift = 0, elbow = 0, wrist = 0] = position;
    // Gravity on the links (cosine of each link's absolute angle), plus a stiff position loop.
    const gravity = [0, 9 * Math.cos(lift) + 4 * Math.cos(lift + elbow), 4 * Math.cos(lift + elbow) + 0.8 * Math.cos(lift + elbow + wrist), 0.8 * Math.cos(lift + elbow + wrist), 0, 0, 0];
    const effort = position.map((p, j) => gravity[j]! + 20 * (command[j]! - p));
    return { command, position, velocity, effort };
  }

  /** The cube's centre at `t` given the gripper tip then: on the table, or in the gripper. */
  private cube(t: number, tip: Point): Point {
    const s = Math.max(0, t) / this.cycleS;
    const cycle = Math.floor(s);
    const f = s - cycle;
    if (f >= ATTACH_F && f < DETACH_F) return tip;
    const spot = this.spot(f < ATTACH_F ? cycle : cycle + 1);
    return { x: spot.x * Math.cos(spot.pan), y: CUBE_SIZE / 2 };
  }

  /** The scene at `t`, from the measured joints: table-top objects, the arm, the cube. */
  scene(t: number): SceneDescription {
    const [pan = 0, lift = 0, elbow = 0, wrist = 0, , , grip = 0] = this.position(t);
    // The camera looks from the side: panning the arm foreshortens its reach.
    const fore = Math.cos(pan);
    const at = (p: Point): Point => ({ x: p.x * fore, y: p.y });
    const a1 = lift;
    const a2 = lift + elbow;
    const a3 = a2 + wrist;
    const e = { x: SHOULDER.x + UPPER_ARM * Math.cos(a1), y: SHOULDER.y + UPPER_ARM * Math.sin(a1) };
    const w = { x: e.x + FOREARM * Math.cos(a2), y: e.y + FOREARM * Math.sin(a2) };
    const d = { x: Math.cos(a3), y: Math.sin(a3) };
    const tip = { x: w.x + HAND * d.x, y: w.y + HAND * d.y };
    const palm = { x: w.x + HAND * 0.45 * d.x, y: w.y + HAND * 0.45 * d.y };
    const gap = 0.012 + 0.05 * grip;
    const n = { x: -d.y * gap, y: d.x * gap };
    const finger = (side: 1 | -1) => ({
      a: at({ x: palm.x + side * n.x, y: palm.y + side * n.y }),
      b: at({ x: tip.x + side * n.x + 0.01 * d.x, y: tip.y + side * n.y + 0.01 * d.y }),
    });
    const cube = this.cube(t, at(tip));
    const half = CUBE_SIZE / 2;
    // A ball rolls to and fro behind the arm, its pace and phase from the episode.
    const ball = { x: -0.2 + 0.08 * Math.sin((2 * Math.PI * t) / (5 + 3 * unit(this.seed, -1, 1)) + 6 * unit(this.seed, -1, 2)), y: 0.04 };
    const link: Rgb = [235, 140, 40];
    const joint: Rgb = [60, 60, 70];
    const metal: Rgb = [150, 155, 165];
    const [f1, f2] = [finger(1), finger(-1)];
    return {
      gripper: at(tip),
      shapes: [
        { kind: 'disc', c: ball, radius: 0.04, colour: [40, 110, 220] },
        { kind: 'rect', min: { x: -0.06, y: 0 }, max: { x: 0.06, y: SHOULDER.y }, colour: [90, 90, 100] },
        { kind: 'segment', a: at(SHOULDER), b: at(e), radius: 0.035, colour: link },
        { kind: 'segment', a: at(e), b: at(w), radius: 0.028, colour: link },
        { kind: 'segment', a: at(w), b: at(palm), radius: 0.02, colour: metal },
        { kind: 'segment', a: f1.a, b: f2.a, radius: 0.01, colour: metal },
        { kind: 'disc', c: at(SHOULDER), radius: 0.045, colour: joint },
        { kind: 'disc', c: at(e), radius: 0.035, colour: joint },
        { kind: 'disc', c: at(w), radius: 0.025, colour: joint },
        { kind: 'rect', min: { x: cube.x - half, y: cube.y - half }, max: { x: cube.x + half, y: cube.y + half }, colour: [210, 40, 45] },
        { kind: 'segment', a: f1.a, b: f1.b, radius: 0.008, colour: metal },
        { kind: 'segment', a: f2.a, b: f2.b, radius: 0.008, colour: metal },
      ],
    };
  }
}

/** Shoulder lift, elbow and wrist angles that put the gripper tip at (x, y) pointing down, elbow up. */
function inverseKinematics(x: number, y: number): [number, number, number] {
  const dx = x - SHOULDER.x;
  const dy = y + HAND - SHOULDER.y;
  const d = Math.min(UPPER_ARM + FOREARM - 1e-3, Math.max(Math.abs(UPPER_ARM - FOREARM) + 1e-3, Math.hypot(dx, dy)));
  const cosElbow = (d * d - UPPER_ARM * UPPER_ARM - FOREARM * FOREARM) / (2 * UPPER_ARM * FOREARM);
  const elbow = -Math.acos(Math.max(-1, Math.min(1, cosElbow)));
  const lift = Math.atan2(dy, dx) - Math.atan2(FOREARM * Math.sin(elbow), UPPER_ARM + FOREARM * Math.cos(elbow));
  return [lift, elbow, -Math.PI / 2 - lift - elbow];
}
