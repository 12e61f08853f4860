// Starting an example receiver (or worker) and waiting for it: shared by
// the end-to-end drivers.
import { spawn } from 'node:child_process';

// Run COMMAND ([cmd, ...args]) with ENV added to this process's; its
// stderr is kept and printed, under LABEL, if it exits with an error.
export function spawnReceiver(label, command, env) {
  const [cmd, ...args] = command;
  const child = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  child.on('exit', (code) => { if (code) console.error(`${label} receiver exited ${code}:\n${stderr}`); });
  return child;
}

// Wait until the receiver on PORT answers GET /healthz (30 s at most).
export async function waitHealthy(port) {
  for (let i = 0; i < 300; i++) {
    try {
      if ((await fetch(`http://127.0.0.1:${port}/healthz`)).ok) return;
    } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`receiver on ${port} never became healthy`);
}
