import { describe, expect, it } from 'vitest';
import { ArmTask, CUBE_SIZE, episodeSeed, type SceneDescription } from './synthetic-motion.js';
import { FRONT_VIEW, SceneRenderer, wristView } from './synthetic-scene.js';

const CUBE_RED = [210, 40, 45] as const;

/** The cube's centre in a scene (the red rectangle). */
function cubeOf(scene: SceneDescription): { x: number; y: number } {
  const cube = scene.shapes.find((s) => s.kind === 'rect' && s.colour.join() === CUBE_RED.join());
  if (cube?.kind !== 'rect') throw new Error('no cube in the scene');
  return { x: (cube.min.x + cube.max.x) / 2, y: (cube.min.y + cube.max.y) / 2 };
}

/** Pixels of one colour in an rgb8 frame. */
function count(pixels: Buffer, [r, g, b]: readonly [number, number, number]): number {
  let n = 0;
  for (let o = 0; o < pixels.length; o += 3) if (pixels[o] === r && pixels[o + 1] === g && pixels[o + 2] === b) n += 1;
  return n;
}

describe('SceneRenderer', () => {
  it('draws the same frame for the same episode and time, and another one later or in another episode', () => {
    const one = new SceneRenderer(320, 240);
    const two = new SceneRenderer(320, 240);
    const task = new ArmTask(episodeSeed('ep_a'));
    const frame = Buffer.from(one.render(task.scene(1.5), FRONT_VIEW));
    expect(frame.length).toBe(320 * 240 * 3);
    expect(Buffer.from(two.render(new ArmTask(episodeSeed('ep_a')).scene(1.5), FRONT_VIEW)).equals(frame)).toBe(true);
    expect(Buffer.from(two.render(task.scene(1.7), FRONT_VIEW)).equals(frame)).toBe(false);
    expect(Buffer.from(two.render(new ArmTask(episodeSeed('ep_b')).scene(1.5), FRONT_VIEW)).equals(frame)).toBe(false);
  });

  it('shows the cube in both views, larger from the wrist while the gripper holds it', () => {
    const task = new ArmTask(episodeSeed('ep_a'));
    const renderer = new SceneRenderer(160, 120);
    const t = task.cycleS * 0.5;
    const scene = task.scene(t);
    const front = count(renderer.render(scene, FRONT_VIEW), CUBE_RED);
    const wrist = count(renderer.render(scene, wristView(scene)), CUBE_RED);
    expect(front).toBeGreaterThan(0);
    expect(wrist).toBeGreaterThan(front * 4);
  });

  it('keeps every shape inside the frame buffer whatever the view (no throw, exact size)', () => {
    const task = new ArmTask(episodeSeed('ep_c'));
    const renderer = new SceneRenderer(17, 16);
    for (let t = 0; t < 2 * task.cycleS; t += 0.37) {
      const scene = task.scene(t);
      expect(renderer.render(scene, wristView(scene)).length).toBe(17 * 16 * 3);
      expect(renderer.render(scene, { centre: { x: 5, y: 5 }, widthM: 0.01 }).length).toBe(17 * 16 * 3);
    }
  });
});

describe('ArmTask: a pick-and-place cycle', () => {
  it('rests the cube on the table, carries it in the gripper mid-cycle, and sets it down elsewhere', () => {
    const task = new ArmTask(episodeSeed('ep_a'));
    const before = task.scene(0.05 * task.cycleS);
    const carried = task.scene(0.55 * task.cycleS);
    const after = task.scene(0.95 * task.cycleS);
    expect(cubeOf(before).y).toBeCloseTo(CUBE_SIZE / 2);
    expect(cubeOf(carried)).toEqual(carried.gripper);
    expect(cubeOf(carried).y).toBeGreaterThan(0.2);
    expect(cubeOf(after).y).toBeCloseTo(CUBE_SIZE / 2);
    expect(Math.abs(cubeOf(after).x - cubeOf(before).x)).toBeGreaterThan(0.05);
    // The next cycle picks the cube up where this one put it down.
    expect(cubeOf(task.scene(1.02 * task.cycleS))).toEqual(cubeOf(after));
  });

  it('closes the gripper to grasp and opens it to release', () => {
    const task = new ArmTask(episodeSeed('ep_a'));
    const grip = (f: number) => task.command(f * task.cycleS)[6]!;
    expect(grip(0.2)).toBeGreaterThan(grip(0.5));
    expect(grip(0.85)).toBeGreaterThan(grip(0.5));
  });

  it('measures what was commanded about a time constant earlier', () => {
    const task = new ArmTask(episodeSeed('ep_a'));
    let now = 0;
    let earlier = 0;
    for (let t = 0.5; t < task.cycleS; t += 0.05) {
      const p = task.position(t);
      now += Math.abs(p[1]! - task.command(t)[1]!);
      earlier += Math.abs(p[1]! - task.command(t - 0.06)[1]!);
    }
    expect(earlier).toBeLessThan(now / 2);
  });
});
