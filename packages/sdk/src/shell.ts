/** Quotes one argument for a POSIX shell. */
export function shellQuote(arg: string): string {
  if (arg !== '' && /^[A-Za-z0-9_/.,:=@%+-]+$/.test(arg)) return arg;
  return `'${arg.replace(/'/g, `'\\''`)}'`;
}

/** A shell command line that runs `argv` exactly, with no expansion. */
export function shellJoin(argv: readonly string[]): string {
  return argv.map(shellQuote).join(' ');
}
