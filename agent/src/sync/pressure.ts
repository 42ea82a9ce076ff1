import { statfs } from 'node:fs/promises';
import type { Pressure } from '@fleet/protocol';
import type { SyncStore } from '../store/types.js';

/** The window the recording rate is measured over. */
export const RECORDING_RATE_WINDOW_MS = 6 * 60 * 60 * 1000;

/** Free bytes of the file system holding `dir`. */
export type FreeBytes = (dir: string) => Promise<number>;

/** Blocks available to the agent (`statfs`), in bytes: what a write can still use. */
export const statfsFreeBytes: FreeBytes = async (dir) => {
  const fs = await statfs(dir);
  return Number(fs.bavail) * Number(fs.bsize);
};

/**
 * The robot's disk as a grant request reports it: free bytes of the data directory's file
 * system, bytes of episodes with no verified replica (they are never pruned), and the hours
 * until the disk is full at the rate episodes were recorded over the last six hours (null when
 * nothing was recorded, i.e. the disk is not filling). `freeBytes` is `statfs` unless the
 * caller injects another measure (a test of a nearly full disk).
 */
export async function measurePressure(dataDir: string, store: SyncStore, now: number, freeBytes: FreeBytes = statfsFreeBytes): Promise<Pressure> {
  const free = Math.max(0, Math.floor(await freeBytes(dataDir)));
  const backlog = Math.max(0, Math.floor(await store.backlogBytes()));
  const recent = await store.recordedBytesSince(now - RECORDING_RATE_WINDOW_MS);
  const perHour = recent / (RECORDING_RATE_WINDOW_MS / 3_600_000);
  return { free_bytes: free, backlog_bytes: backlog, hours_to_full: perHour > 0 ? Math.round((free / perHour) * 100) / 100 : null };
}
