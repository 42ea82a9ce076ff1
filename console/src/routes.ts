import type { ComponentChildren } from 'preact';
import { h } from 'preact';
import type { Scope } from './session.js';
import { FleetView } from './views/fleet.js';
import { RobotView } from './views/robot.js';
import { EpisodesView } from './views/episodes.js';
import { EpisodeView } from './views/episode.js';
import { ReviewView } from './views/review.js';
import { DatasetsView } from './views/datasets.js';
import { DatasetView } from './views/dataset.js';
import { SyncView } from './views/sync.js';
import { WebhooksView } from './views/webhooks.js';
import { WebhookView } from './views/webhook.js';
import { ApiKeysView } from './views/api-keys.js';
import { EnrollmentTokensView } from './views/enrollment-tokens.js';
import { UsageView } from './views/usage.js';

export interface Route {
  path: string;
  /** The scope a page needs to open at all (its actions check their own). */
  scope?: Scope | Scope[];
  render(params: Record<string, string>, query: URLSearchParams): ComponentChildren;
}

const ROBOTS_READ: Scope[] = ['robots:read', 'fleet:read'];

/** Every page of the console; the path is the page's state, the key never is. */
export const ROUTES: Route[] = [
  { path: '/fleet', scope: ROBOTS_READ, render: (_p, q) => h(FleetView, { query: q }) },
  // A data:read key sees a robot's episodes and sync health there (the robot record needs robots:read or fleet:read).
  { path: '/robots/:id', scope: [...ROBOTS_READ, 'data:read'], render: (p) => h(RobotView, { id: p.id!, key: p.id }) },
  { path: '/episodes', scope: 'data:read', render: (_p, q) => h(EpisodesView, { query: q }) },
  { path: '/episodes/:id', scope: 'data:read', render: (p) => h(EpisodeView, { id: p.id!, key: p.id }) },
  // A data:read key can watch a queue; its decisions need data:write (the page says so).
  { path: '/review', scope: 'data:read', render: (_p, q) => h(ReviewView, { query: q }) },
  { path: '/datasets', scope: 'data:read', render: () => h(DatasetsView, {}) },
  { path: '/datasets/:id', scope: 'data:read', render: (p) => h(DatasetView, { id: p.id!, key: p.id }) },
  { path: '/sync', scope: 'data:read', render: () => h(SyncView, {}) },
  { path: '/webhooks', scope: 'admin', render: () => h(WebhooksView, {}) },
  { path: '/webhooks/:id', scope: 'admin', render: (p) => h(WebhookView, { id: p.id!, key: p.id }) },
  { path: '/keys', scope: 'admin', render: () => h(ApiKeysView, {}) },
  { path: '/tokens', scope: 'admin', render: () => h(EnrollmentTokensView, {}) },
  { path: '/usage', render: () => h(UsageView, {}) },
];

/** The main navigation; entries a key cannot open are not shown. */
export const NAV: { path: string; label: string; scope?: Scope | Scope[] }[] = [
  { path: '/fleet', label: 'Fleet', scope: ROBOTS_READ },
  { path: '/episodes', label: 'Episodes', scope: 'data:read' },
  { path: '/review', label: 'Review', scope: 'data:read' },
  { path: '/datasets', label: 'Datasets', scope: 'data:read' },
  { path: '/sync', label: 'Sync', scope: 'data:read' },
  { path: '/webhooks', label: 'Webhooks', scope: 'admin' },
  { path: '/keys', label: 'API keys', scope: 'admin' },
  { path: '/tokens', label: 'Enrollment', scope: 'admin' },
  { path: '/usage', label: 'Plan and usage' },
];
