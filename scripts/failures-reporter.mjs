// A reporter for node's test runner, beside its TAP: at the end, each test that failed (its file,
// its name, the first lines of its error) and the counts. `npm test` prints it after the run, so a
// log cut to its last lines (a CI's) still says what failed.

const ERROR_LINES = 12;

function describe(error) {
  const e = error?.cause ?? error;
  const text = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
  return text.split('\n').slice(0, ERROR_LINES).map((l) => `      ${l}`).join('\n');
}

export default async function* failures(source) {
  const failed = [];
  let pass = 0;
  let fail = 0;
  for await (const event of source) {
    if (event.type === 'test:pass' && event.data.details?.type !== 'suite' && !event.data.skip && !event.data.todo) pass += 1;
    if (event.type !== 'test:fail') continue;
    const { name, file, details } = event.data;
    // A suite fails when one of its tests does: that test is listed itself.
    if (details?.error?.failureType === 'subtestsFailed') continue;
    if (details?.type !== 'suite') fail += 1;
    failed.push(`  ✖ ${file ? `${file.replace(/^.*?\/(e2e|packages|bench)\//, '$1/')}: ` : ''}${name}\n${describe(details?.error)}`);
  }
  if (failed.length) yield `failed:\n${failed.join('\n')}\n`;
  yield `${pass} passed, ${fail} failed\n`;
}
