import type { DebianRootfsRecipe } from './types.js';

/**
 * The built-in templates, built from Debian's packages on first start (cached by recipe). They are
 * one stack: `base` is a Debian rootfs (mmdebstrap); every other is one layer of its own extra
 * packages over its parent's stack (python on base, code-interpreter on python, nodejs and go on
 * base), so what they share is downloaded, unpacked and stored once.
 */
export interface BuiltinTemplate {
  name: string;
  displayName: string;
  description: string;
  category: string;
  language: string;
  features: string[];
  tags: string[];
  resources: { vcpu: number; memoryMb: number; diskGb: number };
  /** The template this one is a layer over; null for the rootfs (`base`). */
  parent: string | null;
  /** base: the rootfs recipe; the others: the packages their own layer adds (apt, no recommends, as mmdebstrap). */
  recipe: DebianRootfsRecipe;
  /** Rough build time of its own layer on the reference machine, seconds: weights progress and estimates. */
  expectedSeconds: number;
  /** Environment its sandboxes start with (e.g. the desktop's DISPLAY). */
  env?: Record<string, string>;
}

const BASE_PACKAGES = ['bash', 'coreutils', 'curl', 'ca-certificates', 'procps'];
/** The desktop: X server, session, remote view, input and capture tools, apps (apt, no recommends). */
const DESKTOP_PACKAGES = [
  'xvfb',
  'xauth',
  'xfonts-base',
  'fonts-dejavu-core',
  'dbus-x11',
  'xfce4',
  'xfce4-terminal',
  'mousepad',
  'x11vnc',
  'novnc',
  'websockify',
  'xdotool',
  'scrot',
  'xclip',
  'wmctrl',
  'x11-utils',
  'x11-xserver-utils',
  'ffmpeg',
  'tesseract-ocr',
  'chromium',
  // gtk-launch: E2B's desktop client starts applications with it (`launch`).
  'libgtk-3-bin',
];
const rootfs = (packages: string[]): DebianRootfsRecipe => ({
  kind: 'debian-rootfs',
  suite: 'bookworm',
  variant: 'minbase',
  packages,
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
    parent: null,
    recipe: rootfs(BASE_PACKAGES),
    expectedSeconds: 70,
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
    parent: 'base',
    recipe: rootfs(['python3', 'python3-pip', 'python3-venv']),
    expectedSeconds: 40,
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
    parent: 'base',
    recipe: rootfs(['nodejs', 'npm']),
    expectedSeconds: 60,
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
    parent: 'base',
    recipe: rootfs(['golang-go', 'git']),
    expectedSeconds: 45,
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
    parent: 'python',
    expectedSeconds: 90,
    recipe: rootfs([
      'python3-numpy',
      'python3-pandas',
      'python3-matplotlib',
      'nodejs',
      'golang-go',
    ]),
  },
  {
    name: 'desktop',
    displayName: 'Desktop (Xfce)',
    description:
      'Debian 12 with an Xfce desktop on a virtual display (Xvfb, 1024x768), started with the sandbox: VNC and noVNC, xdotool, scrot, xclip, wmctrl, xrandr, ffmpeg, tesseract OCR, Chromium, a terminal and a text editor; Python 3.11.',
    category: 'desktop',
    language: 'python',
    features: ['code_execution', 'file_operations', 'commands', 'desktop'],
    tags: ['desktop', 'xfce', 'vnc', 'novnc', 'chromium', 'computer-use'],
    resources: { vcpu: 2, memoryMb: 2048, diskGb: 10 },
    parent: 'python',
    expectedSeconds: 300,
    // The agent starts the display (packages/agent/src/desktop) when it sees SANDBOXD_DESKTOP.
    env: { DISPLAY: ':0', SANDBOXD_DESKTOP: '1024x768x24' },
    recipe: rootfs(DESKTOP_PACKAGES),
  },
];

export const DEFAULT_TEMPLATE = 'code-interpreter';

/** The base rootfs recipe (the bottom of every built-in's stack). */
export const BASE_RECIPE: DebianRootfsRecipe = BUILTIN_TEMPLATES.find((t) => t.name === 'base')!.recipe;

/**
 * `templates` with the parents each needs (a wish for code-interpreter alone builds base and python
 * too), parents before children.
 */
export function withParents(templates: BuiltinTemplate[]): BuiltinTemplate[] {
  const byName = new Map(BUILTIN_TEMPLATES.map((t) => [t.name, t]));
  for (const t of templates) byName.set(t.name, t);
  const out: BuiltinTemplate[] = [];
  const add = (t: BuiltinTemplate) => {
    if (out.includes(t)) return;
    if (t.parent) add(byName.get(t.parent)!);
    out.push(t);
  };
  for (const t of templates) add(t);
  return out;
}
