import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { addDefaultUser } from './default-user.js';

test("a bootstrapped rootfs gets E2B's unprivileged `user` (uid 1000, /home/user from /etc/skel), once", async () => {
  const tree = mkdtempSync(join(tmpdir(), 'default-user-'));
  try {
    mkdirSync(join(tree, 'etc/skel'), { recursive: true });
    writeFileSync(join(tree, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/bash\n');
    writeFileSync(join(tree, 'etc/group'), 'root:x:0:\nusers:x:100:');
    writeFileSync(join(tree, 'etc/shadow'), 'root:*:19000:0:99999:7:::\n');
    writeFileSync(join(tree, 'etc/skel/.bashrc'), '# bashrc\n', { mode: 0o644 });
    await addDefaultUser(tree);
    await addDefaultUser(tree);
    assert.equal(readFileSync(join(tree, 'etc/passwd'), 'utf8'), 'root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n');
    assert.equal(readFileSync(join(tree, 'etc/group'), 'utf8'), 'root:x:0:\nusers:x:100:\nuser:x:1000:\n');
    assert.match(readFileSync(join(tree, 'etc/shadow'), 'utf8'), /\nuser:!:\d+:0:99999:7:::\n$/);
    const home = statSync(join(tree, 'home/user'));
    assert.deepEqual([home.uid, home.gid, home.mode & 0o777], [1000, 1000, 0o750]);
    const rc = statSync(join(tree, 'home/user/.bashrc'));
    assert.deepEqual([rc.uid, rc.mode & 0o777], [1000, 0o644]);
  } finally {
    rmSync(tree, { recursive: true, force: true });
  }
});
