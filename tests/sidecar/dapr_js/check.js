// Dapr's JavaScript SDK (DaprClient over HTTP) against a redlease sidecar: lock, contend,
// unlock by another owner and by the owner, then lock "held" and leave it held. Prints one
// JSON line of what the SDK answered; tests/sidecar/test_dapr_js.py checks it.
// Usage: node check.js PORT STORE [TOKEN]
"use strict";
const { DaprClient, CommunicationProtocolEnum, LogLevel } = require("@dapr/dapr");

async function main() {
  const [port, store, token] = process.argv.slice(2);
  const client = new DaprClient({
    daprHost: "127.0.0.1",
    daprPort: port,
    communicationProtocol: CommunicationProtocolEnum.HTTP,
    daprApiToken: token || undefined,
    logger: { level: LogLevel.Error },
  });
  const out = {};
  out.locked = await client.lock.lock(store, "js-res", "js-owner", 60);
  out.contended = await client.lock.lock(store, "js-res", "someone-else", 60);
  out.unlockedByOther = await client.lock.unlock(store, "js-res", "someone-else");
  out.unlocked = await client.lock.unlock(store, "js-res", "js-owner");
  out.unlockedAgain = await client.lock.unlock(store, "js-res", "js-owner");
  out.held = await client.lock.lock(store, "js-held", "js-owner", 120);
  try {
    await client.lock.lock("no-such-store", "js-res", "js-owner", 60);
    out.otherStore = "accepted";
  } catch (err) {
    out.otherStore = JSON.parse(err.message);
  }
  console.log(JSON.stringify(out));
  await client.stop();
}

main().catch((err) => {
  console.error(String(err && err.stack ? err.stack : err));
  process.exit(1);
});
