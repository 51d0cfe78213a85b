import type { DebianRootfsRecipe } from './types.js';

/** The built-in templates, built from Debian's packages on first start (cached by recipe). */
export interface BuiltinTemplate {
  name: string;
  displayName: string;
  description: string;
  category: string;
  language: string;
  features: string[];
  tags: string[];
  resources: { vcpu: number; memoryMb: number; diskGb: number };
  recipe: DebianRootfsRecipe;
}

const BASE_PACKAGES = ['bash', 'coreutils', 'curl', 'ca-certificates', 'procps'];
const rootfs = (packages: string[]): DebianRootfsRecipe => ({
  kind: 'debian-rootfs',
  suite: 'bookworm',
  variant: 'minbase',
  packages: [...BASE_PACKAGES, ...packages],
});

export const BUILTIN_TEMPLATES: BuiltinTemplate[] = [
  {
    name: 'base',
    displayName: 'Base (Debian 12)',
    description: 'Minimal Debian 12 (bookworm) with bash, coreutils, curl and ca-certificates.',
    category: 'general',
    language: 'bash',
    features: ['code_execution', 'file_operations', 'commands'],
    tags: ['debian', 'bash'],
    resources: { vcpu: 1, memoryMb: 512, diskGb: 2 },
    recipe: rootfs([]),
  },
  {
    name: 'python',
    displayName: 'Python 3.11',
    description: 'Debian 12 with Python 3.11 and pip.',
    category: 'development',
    language: 'python',
    features: ['code_execution', 'file_operations', 'commands'],
    tags: ['python', 'pip'],
    resources: { vcpu: 1, memoryMb: 1024, diskGb: 5 },
    recipe: rootfs(['python3', 'python3-pip', 'python3-venv']),
  },
  {
    name: 'nodejs',
    displayName: 'Node.js 18',
    description: "Debian 12 with Node.js 18 and npm from Debian's packages.",
    category: 'development',
    language: 'javascript',
    features: ['code_execution', 'file_operations', 'commands'],
    tags: ['javascript', 'nodejs', 'npm'],
    resources: { vcpu: 1, memoryMb: 1024, diskGb: 5 },
    recipe: rootfs(['nodejs', 'npm']),
  },
  {
    name: 'go',
    displayName: 'Go 1.19',
    description: "Debian 12 with the Go 1.19 toolchain from Debian's packages.",
    category: 'development',
    language: 'go',
    features: ['code_execution', 'file_operations', 'commands'],
    tags: ['go', 'golang'],
    resources: { vcpu: 1, memoryMb: 1024, diskGb: 5 },
    recipe: rootfs(['golang-go', 'git']),
  },
  {
    name: 'code-interpreter',
    displayName: 'Code Interpreter',
    description: 'Python 3.11 with numpy, pandas and matplotlib; Node.js 18; Go 1.19; bash. The default template.',
    category: 'data-science',
    language: 'python',
    features: ['code_execution', 'file_operations', 'commands', 'rich_outputs'],
    tags: ['python', 'data-science', 'javascript', 'go', 'bash'],
    resources: { vcpu: 2, memoryMb: 2048, diskGb: 10 },
    recipe: rootfs([
      'python3',
      'python3-pip',
      'python3-venv',
      'python3-numpy',
      'python3-pandas',
      'python3-matplotlib',
      'nodejs',
      'golang-go',
    ]),
  },
];

export const DEFAULT_TEMPLATE = 'code-interpreter';
