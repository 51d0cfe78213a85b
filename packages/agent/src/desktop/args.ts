import { ServiceError } from '../proto.js';

/**
 * The checks of what a /desktop/* request asks for, before anything runs. Every tool is started
 * with execFile (no shell), and these keep what reaches a tool's argv in the shapes it expects:
 * numbers in range, key names xdotool reads as keys, never an option.
 */

type Body = Record<string, unknown>;

const bad = (field: string, message: string) => new ServiceError('VALIDATION_ERROR', `${field}: ${message}`, { field });

/** The largest screen side we accept (Xvfb's own limit is far above what a sandbox can hold). */
export const MAX_SIDE = 8192;

/** An integer in [min, max]; numeric strings are accepted (some clients send them). */
export function int(body: Body, field: string, min: number, max: number, fallback?: number): number {
  let v = body[field];
  if (v === undefined || v === null) {
    if (fallback !== undefined) return fallback;
    throw bad(field, 'is required');
  }
  if (typeof v === 'string' && /^-?\d+(\.\d+)?$/.test(v.trim())) v = Number(v);
  if (typeof v !== 'number' || !Number.isFinite(v)) throw bad(field, 'must be a number');
  const n = Math.round(v);
  if (n < min || n > max) throw bad(field, `must be between ${min} and ${max}`);
  return n;
}

/** A point on a screen of any size we serve (0 .. MAX_SIDE-1). */
export function coord(body: Body, field: string, fallback?: number): number {
  return int(body, field, 0, MAX_SIDE - 1, fallback);
}

export function str(body: Body, field: string, maxLength: number, opts: { allowEmpty?: boolean; fallback?: string } = {}): string {
  const v = body[field];
  if (v === undefined || v === null) {
    if (opts.fallback !== undefined) return opts.fallback;
    throw bad(field, 'is required');
  }
  if (typeof v !== 'string') throw bad(field, 'must be a string');
  if (!opts.allowEmpty && v.length === 0) throw bad(field, 'must not be empty');
  if (v.length > maxLength) throw bad(field, `at most ${maxLength} characters`);
  if (v.includes('\0')) throw bad(field, 'must not contain NUL');
  return v;
}

const BUTTONS: Record<string, number> = { left: 1, middle: 2, right: 3, wheel_up: 4, wheel_down: 5, back: 8, forward: 9 };

/** A mouse button by name (left, middle, right, ...) or X button number 1-9. */
export function button(body: Body, field = 'button'): number {
  const v = body[field];
  if (v === undefined || v === null) return 1;
  if (typeof v === 'number' && Number.isInteger(v) && v >= 1 && v <= 9) return v;
  if (typeof v === 'string') {
    const n = BUTTONS[v.trim().toLowerCase()];
    if (n) return n;
    if (/^[1-9]$/.test(v.trim())) return Number(v.trim());
  }
  throw bad(field, `must be one of ${Object.keys(BUTTONS).join(', ')} or 1-9`);
}

/** Friendly names some clients send, as the X keysyms xdotool knows. */
const KEY_ALIASES: Record<string, string> = {
  enter: 'Return',
  return: 'Return',
  esc: 'Escape',
  escape: 'Escape',
  backspace: 'BackSpace',
  tab: 'Tab',
  space: 'space',
  delete: 'Delete',
  del: 'Delete',
  insert: 'Insert',
  home: 'Home',
  end: 'End',
  pageup: 'Page_Up',
  page_up: 'Page_Up',
  pagedown: 'Page_Down',
  page_down: 'Page_Down',
  up: 'Up',
  down: 'Down',
  left: 'Left',
  right: 'Right',
  control: 'ctrl',
  ctrl: 'ctrl',
  alt: 'alt',
  shift: 'shift',
  meta: 'super',
  super: 'super',
  win: 'super',
  windows: 'super',
  cmd: 'super',
  command: 'super',
  capslock: 'Caps_Lock',
  printscreen: 'Print',
  menu: 'Menu',
};

/** Characters xdotool reads specially in a key sequence, as their keysym names. */
const CHAR_KEYSYMS: Record<string, string> = { '+': 'plus', ' ': 'space', '-': 'minus' };

/**
 * One key as xdotool's `key` command takes it: an X keysym name (`Return`, `F5`, `a`), a friendly
 * alias (`enter`, `ctrl`), or one printable character. Never something that reads as an option.
 */
export function keyName(v: unknown, field: string): string {
  if (typeof v !== 'string' || v.length === 0) throw bad(field, 'must be a key name (an X keysym such as Return, Tab, ctrl, a)');
  const alias = KEY_ALIASES[v.toLowerCase()];
  if (alias) return alias;
  if (/^f([1-9]|1[0-9]|2[0-4])$/i.test(v)) return v.toUpperCase();
  if ([...v].length === 1) {
    if (CHAR_KEYSYMS[v]) return CHAR_KEYSYMS[v];
    if (/[\p{C}]/u.test(v)) throw bad(field, 'a control character is not a key name');
    return v;
  }
  if (/^[A-Za-z][A-Za-z0-9_]{0,47}$/.test(v)) return v;
  throw bad(field, `"${v.slice(0, 50)}" is not a key name (an X keysym such as Return, Tab, ctrl, a)`);
}

/** A list of keys pressed together, as xdotool's `a+b+c`. */
export function keyCombo(v: unknown, field: string): string {
  let keys: unknown[];
  if (Array.isArray(v)) keys = v;
  else if (typeof v === 'string' && v.length > 1 && v.includes('+')) keys = v.split('+');
  else if (typeof v === 'string') keys = [v];
  else throw bad(field, 'must be an array of key names');
  if (keys.length === 0 || keys.length > 8) throw bad(field, 'must hold 1 to 8 keys');
  return keys.map((k, i) => keyName(k, `${field}[${i}]`)).join('+');
}

/** An X window id: 0x-hex (as wmctrl prints) or decimal (as xdotool prints); answered as decimal. */
export function windowId(body: Body, field = 'window_id'): number {
  const v = body[field];
  let n = NaN;
  if (typeof v === 'number') n = v;
  else if (typeof v === 'string' && /^0x[0-9a-f]{1,8}$/i.test(v.trim())) n = parseInt(v.trim().slice(2), 16);
  else if (typeof v === 'string' && /^\d{1,10}$/.test(v.trim())) n = Number(v.trim());
  if (!Number.isInteger(n) || n <= 0 || n > 0xffffffff) throw bad(field, 'must be a window id (0x-hex or decimal, as windows/list gives)');
  return n;
}

export const hexId = (n: number) => `0x${n.toString(16).padStart(8, '0')}`;

/** A Tesseract language list such as `eng` or `eng+deu`. */
export function ocrLanguage(body: Body): string {
  const v = str(body, 'language', 64, { fallback: 'eng' });
  if (!/^[a-z_]{3,16}(\+[a-z_]{3,16}){0,3}$/i.test(v)) throw bad('language', 'must be Tesseract language codes such as eng or eng+deu');
  return v;
}
