import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ServiceError } from '../proto.js';
import { SandboxUsers, userPath, usernameOf } from './users.js';

test("the user of a request: Basic credentials' name, else `user`, else root; unknown names refused", () => {
  const etc = mkdtempSync(join(tmpdir(), 'envd-users-'));
  try {
    writeFileSync(join(etc, 'passwd'), 'root:x:0:0:root:/root:/bin/bash\n');
    writeFileSync(join(etc, 'group'), 'root:x:0:\n');
    const users = new SandboxUsers(etc);
    assert.equal(users.fromAuthorization(undefined).name, 'root', 'no `user` in this image: root');
    // Changes to /etc/passwd are seen at once (size and mtime).
    writeFileSync(join(etc, 'passwd'), 'root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n');
    writeFileSync(join(etc, 'group'), 'root:x:0:\nuser:x:1000:\n');
    assert.deepEqual(users.fromAuthorization(null), { name: 'user', uid: 1000, gid: 1000, home: '/home/user', shell: '/bin/bash' });
    assert.equal(users.fromAuthorization(`Basic ${Buffer.from('root:').toString('base64')}`).uid, 0);
    assert.deepEqual([users.userName(1000), users.groupName(1000), users.userName(4242)], ['user', 'user', '4242']);
    for (const bad of [`Basic ${Buffer.from('ghost:').toString('base64')}`, 'Bearer abc', `Basic ${Buffer.from('a/b:').toString('base64')}`]) {
      assert.throws(() => users.fromAuthorization(bad), (e: unknown) => e instanceof ServiceError && e.status === 400, bad);
    }
  } finally {
    rmSync(etc, { recursive: true, force: true });
  }
});

test("paths: relative ones and ~ from the user's home, normalized; NUL and huge refused", () => {
  const user = { name: 'user', uid: 1000, gid: 1000, home: '/home/user', shell: '/bin/bash' };
  assert.equal(userPath('a/b.txt', user), '/home/user/a/b.txt');
  assert.equal(userPath('~/x/', user), '/home/user/x');
  assert.equal(userPath('', user), '/home/user');
  assert.equal(userPath('/tmp/../etc/./passwd', user), '/etc/passwd');
  assert.throws(() => userPath('a\0b', user), ServiceError);
  assert.throws(() => userPath('x'.repeat(5000), user), ServiceError);
  assert.equal(usernameOf(`Basic ${Buffer.from('root:').toString('base64')}`), 'root');
  assert.equal(usernameOf(undefined), undefined);
});
