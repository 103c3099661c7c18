// node-nats-streaming 0.3.2 (nats@1) against a STAN server: prints one JSON line of results.
// Usage: node scenario.js <nats url>
const stan = require('node-nats-streaming');
const url = process.argv[2];
const results = {};
const timer = setTimeout(() => finish('timeout'), 15000);

function finish(error) {
  clearTimeout(timer);
  if (error) results.error = String(error);
  console.log(JSON.stringify(results));
  process.exit(error ? 1 : 0);
}

function connect(id) {
  return new Promise((resolve, reject) => {
    const sc = stan.connect('test-cluster', id, {url});
    sc.on('connect', () => resolve(sc));
    sc.on('error', reject);
  });
}

function publish(sc, subject, data) {
  return new Promise((resolve, reject) => sc.publish(subject, data, (err, guid) => err ? reject(err) : resolve(guid)));
}

function collect(sc, subject, opts, n, queue) {
  return new Promise((resolve) => {
    const got = [];
    const sub = queue ? sc.subscribe(subject, queue, opts) : sc.subscribe(subject, opts);
    sub.on('message', (m) => {
      got.push([m.getSequence(), m.getData(), m.isRedelivered()]);
      if (got.length === n) resolve({sub, got});
    });
  });
}

function closeSub(sub, how) {
  return new Promise((resolve) => { sub.on(how === 'close' ? 'closed' : 'unsubscribed', resolve); how === 'close' ? sub.close() : sub.unsubscribe(); });
}

(async () => {
  const sc = await connect('node-a');
  for (let i = 1; i <= 5; i++) await publish(sc, 'node.ch', 'm' + i);
  const all = await collect(sc, 'node.ch', sc.subscriptionOptions().setDeliverAllAvailable(), 5);
  results.all = all.got;
  await closeSub(all.sub, 'unsubscribe');
  const fromSeq = await collect(sc, 'node.ch', sc.subscriptionOptions().setStartAtSequence(4), 2);
  results.fromSeq = fromSeq.got;
  await closeSub(fromSeq.sub, 'unsubscribe');
  const last = await collect(sc, 'node.ch', sc.subscriptionOptions().setStartWithLastReceived(), 1);
  results.last = last.got;
  await closeSub(last.sub, 'unsubscribe');
  // redelivery after ackWait (1 s), manual acks
  const redo = collect(sc, 'node.redo', sc.subscriptionOptions().setManualAckMode(true).setAckWait(1000), 2);
  await publish(sc, 'node.redo', 'again');
  results.redo = (await redo).got;
  // durable: close, then resume
  const dopts = () => sc.subscriptionOptions().setDurableName('dur').setDeliverAllAvailable();
  const d1 = collect(sc, 'node.dur', dopts(), 1);
  await publish(sc, 'node.dur', 'd1');
  await closeSub((await d1).sub, 'close');
  await publish(sc, 'node.dur', 'd2');
  const d2 = await collect(sc, 'node.dur', dopts(), 1);
  results.durable = d2.got;
  // duplicate client id
  try { await connect('node-a'); results.duplicate = 'connected'; } catch (e) { results.duplicate = (e && e.message) || String(e); }
  sc.close();
  sc.on('close', () => finish());
})().catch(finish);
