/**
 * `/commands/run` without `args` means `/bin/sh -c COMMAND`. When COMMAND is a plain word list that
 * the shell would only split on spaces, running it directly gives the same result one exec sooner.
 */

// Anything a POSIX shell treats specially: quoting, expansion, globbing, redirection, operators, comments.
const SHELL_SPECIAL = /[^A-Za-z0-9_\-./:,+@%=^ ]/;
// Words that only exist inside a shell (builtins without a binary, keywords, reserved words).
const SHELL_ONLY = new Set([
  '.', ':', '!', '{', '}', '[[', 'alias', 'bg', 'break', 'case', 'cd', 'command', 'continue', 'declare', 'do',
  'done', 'elif', 'else', 'esac', 'eval', 'exec', 'exit', 'export', 'fc', 'fg', 'fi', 'for', 'function',
  'getopts', 'hash', 'if', 'in', 'jobs', 'let', 'local', 'read', 'readonly', 'return', 'select', 'set', 'shift',
  'source', 'then', 'time', 'times', 'trap', 'type', 'typeset', 'ulimit', 'umask', 'unalias', 'unset', 'until',
  'wait', 'while',
]);

/** The argv a shell would build for `command`, or null when a real shell is needed. */
export function plainArgv(command: string): string[] | null {
  if (SHELL_SPECIAL.test(command)) return null;
  const words = command.split(' ').filter((w) => w !== '');
  if (words.length === 0) return null;
  const first = words[0]!;
  // `A=1 cmd` is an assignment prefix; `~` never reaches here (it is special above).
  if (first.includes('=') || SHELL_ONLY.has(first)) return null;
  return words;
}
