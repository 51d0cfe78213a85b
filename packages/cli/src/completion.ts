import type { Command, OptionSpec } from './command.js';

/** A bash completion script: command names, sub-commands and each command's flags. */
export function completionScript(commands: Command[], globals: Record<string, OptionSpec>, groups: string[]): string {
  const flags = (opts: Record<string, OptionSpec>): string =>
    Object.entries({ ...globals, ...opts })
      .map(([n, o]) => `--${n}${o.short ? ` -${o.short}` : ''}`)
      .join(' ');
  const top = [...new Set(commands.map((c) => c.name.split(' ')[0]!)), 'completion', 'help'].join(' ');
  const cases = commands.map((c) => `    "${c.name}") opts="${flags(c.options)}" ;;`).join('\n');
  const subs = groups
    .map((g) => `    ${g}) subs="${commands.filter((c) => c.name.startsWith(g + ' ')).map((c) => c.name.split(' ')[1]).join(' ')}" ;;`)
    .join('\n');
  return `# bash completion for sbx. Load with: source <(sbx completion bash)
_sbx() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" cmd="\${COMP_WORDS[1]}" opts="" subs=""
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=( $(compgen -W "${top}" -- "$cur") ); return
  fi
  case "$cmd" in
${subs}
  esac
  if [ -n "$subs" ]; then
    if [ "$COMP_CWORD" -eq 2 ]; then COMPREPLY=( $(compgen -W "$subs" -- "$cur") ); return; fi
    cmd="$cmd \${COMP_WORDS[2]}"
  fi
  case "$cmd" in
${cases}
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=( $(compgen -W "$opts" -- "$cur") )
  else
    COMPREPLY=( $(compgen -f -- "$cur") )
  fi
}
complete -F _sbx sbx
`;
}
