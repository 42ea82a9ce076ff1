/**
 * The usage rules every command line of the project follows (fleet-cloud, fleet-agent,
 * fleet-sim, fleet): a usage error (unknown command or option, a missing argument or mandatory
 * option) prints one line, `NAME: what is wrong (see NAME --help)`, and exits 2; `--help` and
 * `--version` exit 0. Typed structurally, so this package does not depend on commander.
 */

/** Exit code of a usage error. */
export const EXIT_USAGE = 2;

/** The part of a commander `Command` the rules use. */
export interface UsageCommand {
  name(): string;
  readonly commands: readonly UsageCommand[];
  exitOverride(fn: (err: { exitCode: number }) => void): unknown;
  configureOutput(output: { outputError?: (str: string, write: (str: string) => void) => void }): unknown;
  showHelpAfterError(displayHelp?: boolean | string): unknown;
}

/**
 * Applies the rules to `program` and every subcommand defined so far (call it after the last
 * `.command(...)`). `exit` is injectable for tests.
 */
export function applyUsageRules(program: UsageCommand, exit: (code: number) => never = (code) => process.exit(code)): void {
  const visit = (cmd: UsageCommand, path: string) => {
    cmd.showHelpAfterError(false);
    cmd.configureOutput({
      outputError: (str, write) => {
        const message = str.trim().replace(/^error: /, '').split('\n')[0] ?? '';
        write(`${program.name()}: ${message} (see ${path} --help)\n`);
      },
    });
    cmd.exitOverride((err) => exit(err.exitCode === 0 ? 0 : EXIT_USAGE));
    for (const sub of cmd.commands) visit(sub, `${path} ${sub.name()}`);
  };
  visit(program, program.name());
}
