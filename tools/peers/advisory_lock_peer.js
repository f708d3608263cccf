// npm advisory-lock 2.0.0, as its README uses it: one mutex per name, tryLock() then unlock().
// Prints uncontended acquire+release cycles per second on 64 rotating names, one at a time.
const advisoryLock = require("advisory-lock").default;

async function main() {
  const [uri, seconds] = process.argv.slice(2);
  const createMutex = advisoryLock(uri);
  const mutexes = Array.from({ length: 64 }, (_, i) => createMutex(`peers/advisory-lock/${i}`));
  const started = process.hrtime.bigint();
  const limit = BigInt(Math.round(Number(seconds) * 1e9));
  let cycles = 0;
  while (process.hrtime.bigint() - started < limit) {
    const unlock = await mutexes[cycles % 64].tryLock();
    if (!unlock) throw new Error("advisory-lock: an uncontended lock was not granted");
    await unlock();
    cycles += 1;
  }
  const elapsed = Number(process.hrtime.bigint() - started) / 1e9;
  process.stdout.write(`${cycles / elapsed}\n`);
  process.exit(0);  // the library keeps its pool open
}

main().catch((error) => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(1);
});
