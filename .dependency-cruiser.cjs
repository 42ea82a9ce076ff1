// The import graph's rules (`npm run lint` runs `depcruise`): each workspace's floors import only
// downward, and no workspace has a cycle. docs/architecture.md draws the floors these rules hold.
// Tests and test support may reach across floors (they assemble the parts they test).

const TESTS = '\\.test\\.tsx?$|/test-support\\.ts$|/test-[a-z-]+\\.ts$|\\.fixture\\.ts$';

/* global module */

/**
 * `from` may import nothing in `within` but the paths of `allowed`.
 * @param {string} name @param {string} comment @param {string} from @param {string} within @param {string} allowed
 * @param {{ dependencyTypesNot?: import('dependency-cruiser').DependencyType[] }} [extra]
 * @returns {import('dependency-cruiser').IForbiddenRuleType}
 */
function only(name, comment, from, within, allowed, extra = {}) {
  return {
    name,
    comment,
    severity: 'error',
    from: { path: from, pathNot: TESTS },
    to: { path: within, pathNot: allowed, ...extra },
  };
}

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'A cycle ties modules that should be read, tested and changed one at a time.',
      severity: 'error',
      from: {},
      to: { circular: true },
    },

    // The cloud, bottom to top: @fleet/protocol; rules/ (pure decisions); store/ (the database,
    // no business rules of its own); the services (sync, robots, episodes, webhooks, streams,
    // egress, mqtt); http/ (the request pipeline); routes/ (the /v1 modules); the composition
    // root (server.ts builds every part, app.ts assembles the HTTP app, cli/ and index.ts).
    only(
      'cloud-rules-are-pure',
      'rules/ decides from its arguments: it imports only the protocol, other rules and (as types) the rows they decide on.',
      '^cloud/src/rules/',
      '^cloud/src/',
      '^cloud/src/rules/',
      { dependencyTypesNot: ['type-only'] },
    ),
    only(
      'cloud-rules-types-only-rows',
      'The only types rules/ takes from above it are the store\'s row shapes.',
      '^cloud/src/rules/',
      '^cloud/src/',
      '^cloud/src/(rules|store/shared)/',
    ),
    only(
      'cloud-store-imports-nothing-above',
      'The store holds the SQL and imports only the rules it applies inside its transactions.',
      '^cloud/src/store/',
      '^cloud/src/',
      '^cloud/src/(store|rules)/',
    ),
    only(
      'cloud-services-below-http',
      'The services know nothing of HTTP, the /v1 routes or the composition root.',
      '^cloud/src/(sync|robots|episodes|webhooks|streams|egress|mqtt|store|rules)/',
      '^cloud/src/(http|routes|cli)/|^cloud/src/(app|server|cli|index)\\.ts$',
      '^$',
    ),
    only(
      'cloud-http-below-routes',
      'The request pipeline knows no route module and no composition root.',
      '^cloud/src/http/',
      '^cloud/src/(routes|cli)/|^cloud/src/(app|server|cli|index)\\.ts$',
      '^$',
    ),
    {
      name: 'cloud-root-on-top',
      comment: 'Only the composition root and the command line build the cloud (server.ts, app.ts).',
      severity: 'error',
      from: { path: '^cloud/src/', pathNot: `${TESTS}|^cloud/src/(server|index|cli)\\.ts$|^cloud/src/cli/` },
      to: { path: '^cloud/src/(app|server)\\.ts$' },
    },

    // The agent, bottom to top: rules/ (pure: episode facts, the operator context); store/ (the
    // only module that runs SQL); the parts (control/, link/, recording/, sync/ and the modules
    // beside them); the composition root (daemon.ts's Agent, robot-parts.ts; cli.ts, index.ts).
    only(
      'agent-rules-are-pure',
      'rules/ imports nothing of the agent outside itself.',
      '^agent/src/rules/',
      '^agent/src/',
      '^agent/src/rules/',
    ),
    only(
      'agent-store-imports-nothing-above',
      'The store types its rows by the rules floor, never by a part above it.',
      '^agent/src/store/',
      '^agent/src/',
      '^agent/src/(store|rules)/',
    ),
    {
      name: 'agent-root-on-top',
      comment: 'Only the command line and the package entry import the composition root.',
      severity: 'error',
      from: { path: '^agent/src/', pathNot: `${TESTS}|^agent/src/(daemon|robot-parts|cli|cli-config|status-view|index)\\.ts$` },
      to: { path: '^agent/src/(daemon|robot-parts)\\.ts$' },
    },

    // The console, bottom to top: session.ts, router.ts, live.ts (the session, the address bar,
    // the live connection); ui/ (components, hooks, formatting); player/ (the recording player,
    // a self-contained engine) and review/; views/ (one page each); routes.ts, app.tsx, main.tsx.
    only(
      'console-base-knows-no-ui',
      'The session, the router and the live connection know no component or page.',
      '^console/src/(session|router|live)\\.ts$',
      '^console/src/',
      '^console/src/(session|router|live)\\.ts$',
    ),
    only(
      'console-ui-knows-no-page',
      'ui/ is the kit the pages are built from: it imports no page, no player and no route table.',
      '^console/src/ui/',
      '^console/src/',
      '^console/src/(ui/|session\\.ts$|router\\.ts$|live\\.ts$)',
    ),
    only(
      'console-player-stands-alone',
      'The player is an engine of its own: it imports nothing else of the console.',
      '^console/src/player/',
      '^console/src/',
      '^console/src/player/',
    ),
    only(
      'console-review-below-views',
      'The review queue\'s logic imports the kit and the player, never a page.',
      '^console/src/review/',
      '^console/src/',
      '^console/src/(review|ui|player)/|^console/src/(session|router|live)\\.ts$',
    ),
    only(
      'console-views-below-routes',
      'A page never imports the route table or the app that holds it.',
      '^console/src/views/',
      '^console/src/(routes\\.ts|app\\.tsx|main\\.tsx)$',
      '^$',
    ),
  ],
  options: {
    // Type-only imports count: a type import upward is a dependency upward all the same.
    tsPreCompilationDeps: true,
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '(^|/)(dist|node_modules)/' },
    enhancedResolveOptions: { extensions: ['.ts', '.tsx', '.js', '.mjs', '.cjs', '.json'] },
  },
};
