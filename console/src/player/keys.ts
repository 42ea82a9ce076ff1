/**
 * The player's keys. Others on the page (the review queue's a r o u n p and digits) are left
 * alone, and nothing fires while the user types in a field or holds Ctrl/Alt/Meta.
 */

export type PlayerAction = 'toggle' | 'prev-frame' | 'next-frame' | 'back-1s' | 'forward-1s' | 'start' | 'end' | 'slower' | 'faster';

export const PLAYER_KEYS: readonly { keys: string; action: string }[] = [
  { keys: 'Space', action: 'play / pause' },
  { keys: '← / →', action: 'previous / next frame of the main camera' },
  { keys: 'Shift + ← / →', action: '1 s back / forward' },
  { keys: 'Home / End', action: 'start / end of the recording' },
  { keys: '[ / ]', action: 'slower / faster (0.25x to 4x)' },
];

/** True when the key is meant for a field (typing, a select, a slider being moved with arrows). */
export function isTypingTarget(target: EventTarget | null): boolean {
  if (!(target instanceof HTMLElement)) return false;
  if (target.isContentEditable) return true;
  const tag = target.tagName;
  if (tag === 'TEXTAREA' || tag === 'SELECT') return true;
  if (tag !== 'INPUT') return false;
  const type = (target as HTMLInputElement).type;
  // Checkboxes and buttons take Space themselves; a range moves with arrows, Home and End.
  return !['button', 'submit', 'reset', 'image'].includes(type);
}

export function actionOf(e: KeyboardEvent): PlayerAction | undefined {
  if (e.ctrlKey || e.altKey || e.metaKey || e.defaultPrevented) return undefined;
  if (isTypingTarget(e.target)) return undefined;
  switch (e.key) {
    case ' ':
      // Space on a focused button presses that button; the player's own keys are for the page.
      return e.target instanceof HTMLButtonElement || e.target instanceof HTMLAnchorElement || (e.target instanceof HTMLElement && e.target.tagName === 'SUMMARY') ? undefined : 'toggle';
    case 'ArrowLeft':
      return e.shiftKey ? 'back-1s' : 'prev-frame';
    case 'ArrowRight':
      return e.shiftKey ? 'forward-1s' : 'next-frame';
    case 'Home':
      return 'start';
    case 'End':
      return 'end';
    case '[':
      return 'slower';
    case ']':
      return 'faster';
    default:
      return undefined;
  }
}
