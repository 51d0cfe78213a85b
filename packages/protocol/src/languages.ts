/** Languages of /execute and their accepted aliases (api-decisions.md §4). */
export const LANGUAGES = ['python', 'javascript', 'bash', 'go'] as const;
export type Language = (typeof LANGUAGES)[number];

const ALIASES: Record<string, Language> = {
  python: 'python',
  python3: 'python',
  py: 'python',
  javascript: 'javascript',
  js: 'javascript',
  node: 'javascript',
  nodejs: 'javascript',
  bash: 'bash',
  sh: 'bash',
  shell: 'bash',
  go: 'go',
  golang: 'go',
};

export function normalizeLanguage(input: string | undefined): Language | undefined {
  if (input === undefined) return 'python';
  return ALIASES[input.toLowerCase()];
}

export const LANGUAGE_ALIASES = Object.keys(ALIASES);
