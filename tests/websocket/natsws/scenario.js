// nats.ws (the browser client) against natserver's websocket listener, in node with the `ws`
// package standing in for the browser's WebSocket. Prints one JSON line with what it saw.
globalThis.WebSocket = require("ws");
const { connect, StringCodec } = require("nats.ws");

async function main() {
  const url = process.argv[2];
  const sc = StringCodec();
  const nc = await connect({ servers: url });
  const sub = nc.subscribe("greet.*", { max: 3 });
  const seen = [];
  const done = (async () => {
    for await (const m of sub) seen.push([m.subject, sc.decode(m.data)]);
  })();
  nc.subscribe("svc", { callback: (err, m) => m.respond(sc.encode("re:" + sc.decode(m.data))) });
  await nc.flush();
  for (const who of ["a", "b", "c"]) nc.publish(`greet.${who}`, sc.encode(`hi ${who}`));
  const reply = await nc.request("svc", sc.encode("q"), { timeout: 5000 });
  await done;
  const info = nc.info;
  await nc.drain();
  console.log(JSON.stringify({ seen, reply: sc.decode(reply.data), server_id: info.server_id }));
}

main().catch((err) => { console.error(err); process.exit(1); });
