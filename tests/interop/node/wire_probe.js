// A producer and result reader written from the README's wire format alone (kafkajs, no
// inferbus code): JSON, base64 and binary-frame requests on each ingest topic, a W3C
// traceparent, a gzip batch, a record without a key, and three bad requests. Prints one
// JSON line per case ({"case", "expect", "status", "message"}); exit 1 if any differs.
// Run: npm ci --prefix tests/interop/node && node tests/interop/node/wire_probe.js HOST:PORT
// (tests/integration/test_node_producer.py does, against a real broker and stack).
const { Kafka, CompressionTypes, Partitioners, logLevel } = require('kafkajs');
const crypto = require('crypto');
const broker = process.argv[2];
const kafka = new Kafka({ clientId: 'inferbus-wire-probe', brokers: [broker], logLevel: logLevel.ERROR });

function f32(values) { const b = Buffer.alloc(values.length * 4); values.forEach((v, i) => b.writeFloatLE(v, i * 4)); return b; }
function frame(envelope, payload) {
  const env = Buffer.from(JSON.stringify(envelope), 'utf8');
  const head = Buffer.alloc(8); head.write('IBF1', 0, 'ascii'); head.writeUInt32BE(env.length, 4);
  return Buffer.concat([head, env, payload]);
}
function parseResult(value) {
  if (value.slice(0, 4).toString('ascii') === 'IBF1') {
    const n = value.readUInt32BE(4);
    const env = JSON.parse(value.slice(8, 8 + n).toString('utf8'));
    env._payload_bytes = value.length - 8 - n;
    return env;
  }
  return JSON.parse(value.toString('utf8'));
}
const x = Array.from({ length: 16 }, (_, i) => i / 16);
const id = (p) => `${p}-${crypto.randomBytes(6).toString('hex')}`;
const cases = [
  { name: 'json nested', topic: 'inferbus.ingest.interactive', expect: 'ok',
    value: (rid) => JSON.stringify({ schema_version: 1, request_id: rid, model: 'demo-mlp', inputs: { x: { dtype: 'float32', shape: [1, 16], data: [x] } }, timeout_ms: 10000, tenant: 'node' }) },
  { name: 'json b64', topic: 'inferbus.ingest.interactive', expect: 'ok',
    value: (rid) => JSON.stringify({ schema_version: 1, request_id: rid, model: 'demo-mlp', inputs: { x: { dtype: 'float32', shape: [1, 16], b64: f32(x).toString('base64') } } }) },
  { name: 'frame', topic: 'inferbus.ingest.interactive', expect: 'ok', headers: { 'content-type': 'application/vnd.inferbus.frame' },
    value: (rid) => frame({ schema_version: 1, request_id: rid, model: 'demo-mlp', inputs: { x: { dtype: 'float32', shape: [1, 16], raw: { offset: 0, nbytes: 64 } } } }, f32(x)) },
  { name: 'frame 2 samples', topic: 'inferbus.ingest.batch', expect: 'ok',
    value: (rid) => frame({ schema_version: 1, request_id: rid, model: 'demo-mlp', inputs: { x: { dtype: 'float32', shape: [2, 16], raw: { offset: 0, nbytes: 128 } } } }, f32([...x, ...x])) },
  { name: 'text critical', topic: 'inferbus.ingest.critical', expect: 'ok',
    value: (rid) => JSON.stringify({ schema_version: 1, request_id: rid, model: 'demo-encoder', inputs: { text: { text: 'where is my parcel' } } }) },
  { name: 'traceparent header', topic: 'inferbus.ingest.interactive', expect: 'ok',
    headers: { traceparent: '00-' + crypto.randomBytes(16).toString('hex') + '-' + crypto.randomBytes(8).toString('hex') + '-01' },
    value: (rid) => JSON.stringify({ schema_version: 1, request_id: rid, model: 'demo-mlp', inputs: { x: { dtype: 'float32', shape: [1, 16], data: [x] } } }) },
  { name: 'shared topic tier field', topic: 'inferbus.ingest', expect: 'ok',
    value: (rid) => JSON.stringify({ schema_version: 1, request_id: rid, model: 'demo-mlp', tier: 'batch', inputs: { x: { dtype: 'float32', shape: [1, 16], data: [x] } } }) },
  { name: 'wrong shape', topic: 'inferbus.ingest.interactive', expect: 'invalid_input',
    value: (rid) => JSON.stringify({ schema_version: 1, request_id: rid, model: 'demo-mlp', inputs: { x: { dtype: 'float32', shape: [1, 15], data: [x.slice(1)] } } }) },
  { name: 'null tier (Jackson style)', topic: 'inferbus.ingest.interactive', expect: 'invalid_input',
    value: (rid) => JSON.stringify({ schema_version: 1, request_id: rid, model: 'demo-mlp', tier: null, inputs: { x: { dtype: 'float32', shape: [1, 16], data: [x] } } }) },
  { name: 'unknown model', topic: 'inferbus.ingest.interactive', expect: 'model_not_found',
    value: (rid) => JSON.stringify({ schema_version: 1, request_id: rid, model: 'nope', inputs: { x: { dtype: 'float32', shape: [1, 16], data: [x] } } }) },
  { name: 'gzip batch', topic: 'inferbus.ingest.interactive', expect: 'ok', compression: CompressionTypes.GZIP,
    value: (rid) => JSON.stringify({ schema_version: 1, request_id: rid, model: 'demo-mlp', inputs: { x: { dtype: 'float32', shape: [1, 16], data: [x] } } }) },
  { name: 'no key', topic: 'inferbus.ingest.interactive', expect: 'ok', nokey: true,
    value: (rid) => JSON.stringify({ schema_version: 1, request_id: rid, model: 'demo-mlp', inputs: { x: { dtype: 'float32', shape: [1, 16], data: [x] } } }) },
];

(async () => {
  const consumer = kafka.consumer({ groupId: id('node-results') });
  await consumer.connect();
  await consumer.subscribe({ topic: 'inferbus.results', fromBeginning: false });
  const want = new Map(); const got = new Map();
  let joined; const join = new Promise((r) => (joined = r));
  consumer.on(consumer.events.GROUP_JOIN, () => joined());
  await consumer.run({ eachMessage: async ({ message }) => {
    let r; try { r = parseResult(message.value); } catch (e) { return; }
    if (want.has(r.request_id) && !got.has(r.request_id)) got.set(r.request_id, r);
  } });
  await join; await new Promise((r) => setTimeout(r, 2000));
  const producer = kafka.producer({ allowAutoTopicCreation: false, createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  for (const c of cases) {
    const rid = id(c.name.replace(/[^a-z0-9]/gi, '-'));
    want.set(rid, c);
    await producer.send({ topic: c.topic, acks: -1, compression: c.compression,
      messages: [{ key: c.nokey ? null : rid, value: c.value(rid), headers: c.headers }] });
  }
  const until = Date.now() + 30000;
  while (got.size < want.size && Date.now() < until) await new Promise((r) => setTimeout(r, 200));
  let bad = 0;
  for (const [rid, c] of want) {
    const r = got.get(rid);
    const status = r ? r.status : 'no result within 30 s';
    if (status !== c.expect) bad++;
    const line = { case: c.name, expect: c.expect, status, message: r && r.error ? r.error.message : null,
      outputs: r && r.outputs ? Object.keys(r.outputs) : [], frame_payload_bytes: r ? r._payload_bytes ?? null : null };
    console.log(JSON.stringify(line));
  }
  await producer.disconnect(); await consumer.disconnect();
  process.exit(bad ? 1 : 0);
})().catch((e) => { console.error(e); process.exit(2); });
