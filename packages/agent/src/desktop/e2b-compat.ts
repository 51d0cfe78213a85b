import { existsSync, lstatSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/**
 * E2B's desktop client (`@e2b/desktop`) drives the desktop through ordinary commands: on create it
 * starts `Xvfb :0` and `startxfce4` itself, and its stream runs `/opt/noVNC/utils/novnc_proxy`.
 * Our display and session already run when a sandbox is handed out: its Xvfb finds the display
 * taken and exits (harmless), but a second Xfce session on the same display would start a second
 * panel and desktop over ours. Two small files make the template what that client expects:
 *
 * - `/usr/local/bin/startxfce4` (ahead of /usr/bin on every login PATH): does nothing while an
 *   Xfce session runs, else runs Debian's.
 * - `/opt/noVNC`: Debian's noVNC (`/usr/share/novnc`, whose novnc_proxy uses the installed
 *   websockify), at the path the client names.
 *
 * Each is written only where nothing is (a template's own files win). Returns what was done, for
 * the desktop's log.
 */
export const STARTXFCE4_SHIM = '/usr/local/bin/startxfce4';
export const NOVNC_LINK = '/opt/noVNC';
export const DEBIAN_STARTXFCE4 = '/usr/bin/startxfce4';
export const DEBIAN_NOVNC = '/usr/share/novnc';

export const STARTXFCE4_SCRIPT = `#!/bin/sh
# Written by the sandboxd agent. This sandbox's Xfce session starts with it; a second one on the
# same display (E2B's desktop client runs startxfce4 itself) would double the panel and desktop.
if pgrep -x xfce4-session >/dev/null 2>&1; then exit 0; fi
exec ${DEBIAN_STARTXFCE4} "$@"
`;

function present(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

/** `root`: the filesystem to write in (the sandbox's `/`; a directory in tests). */
export function e2bDesktopShims(root = '/'): string[] {
  const at = (p: string) => join(root, p);
  const done: string[] = [];
  try {
    if (existsSync(at(DEBIAN_STARTXFCE4)) && !present(at(STARTXFCE4_SHIM))) {
      mkdirSync(dirname(at(STARTXFCE4_SHIM)), { recursive: true });
      writeFileSync(at(STARTXFCE4_SHIM), STARTXFCE4_SCRIPT, { mode: 0o755 });
      done.push(`${STARTXFCE4_SHIM}: a no-op while the session runs`);
    }
  } catch (err) {
    done.push(`cannot write ${STARTXFCE4_SHIM}: ${(err as Error).message}`);
  }
  try {
    if (existsSync(at(DEBIAN_NOVNC)) && !present(at(NOVNC_LINK))) {
      mkdirSync(dirname(at(NOVNC_LINK)), { recursive: true });
      symlinkSync(DEBIAN_NOVNC, at(NOVNC_LINK));
      done.push(`${NOVNC_LINK} -> ${DEBIAN_NOVNC}`);
    }
  } catch (err) {
    done.push(`cannot link ${NOVNC_LINK}: ${(err as Error).message}`);
  }
  return done;
}
