import { h, type FunctionComponent } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import type { PlayerProps } from './types.js';

export type { PlayerProblem, PlayerProps, PlayerState, PlayerStatus } from './types.js';

/**
 * The episode player (view.tsx), loaded on first use: the MCAP reader, its decoders and wasm
 * decompressors and uPlot are a chunk of their own, so the rest of the console does not carry
 * them.
 */
type View = FunctionComponent<PlayerProps>;
let loaded: Promise<View> | undefined;
const load = () => (loaded ??= import('./view.js').then((m) => m.PlayerView));

export function Player(props: PlayerProps) {
  const [view, setView] = useState<{ View: View } | { error: unknown } | undefined>(undefined);
  useEffect(() => {
    let live = true;
    load().then(
      (View) => live && setView({ View }),
      (error: unknown) => {
        // A failed chunk load (an upgrade replaced the build): the next mount tries again.
        loaded = undefined;
        if (live) setView({ error });
      },
    );
    return () => void (live = false);
  }, []);
  if (view === undefined) return h('div', { class: 'player', 'data-status': 'loading' }, h('div', { class: 'player-state', role: 'status' }, 'Loading the player…'));
  if ('error' in view) {
    return h(
      'div',
      { class: 'player', 'data-status': 'unavailable' },
      h('div', { class: 'notice error', role: 'alert' }, h('strong', null, 'The player could not load'), h('p', null, `${view.error instanceof Error ? view.error.message : String(view.error)}. Reload the page.`)),
    );
  }
  return h(view.View, props);
}
