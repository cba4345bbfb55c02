// Proxyless grpc-js-xds client for meshfed's end-to-end tests: dials an
// xds:/// target (bootstrap from GRPC_XDS_BOOTSTRAP) and calls
// grpc.health.v1.Health/Check in a bounded loop, printing one JSON line per
// call with the backend that answered ("x-backend" header) or the error.
'use strict';
const path = require('path');
const grpc = require('@grpc/grpc-js');
const xds = require('@grpc/grpc-js-xds');
const protoLoader = require('@grpc/proto-loader');

const args = Object.fromEntries(process.argv.slice(2).map((a) => a.replace(/^--?/, '').split('=')));
const target = args.target;
const intervalMs = Number(args.interval || 50);
const durationMs = Number(args.duration || 180000);
if (!target || !process.env.GRPC_XDS_BOOTSTRAP) {
  console.error('usage: GRPC_XDS_BOOTSTRAP=FILE node client.js --target=xds:///host:port');
  process.exit(2);
}
xds.register();
const def = protoLoader.loadSync(path.join(__dirname, 'health.proto'));
const Health = grpc.loadPackageDefinition(def).grpc.health.v1.Health;
const client = new Health(target, grpc.credentials.createInsecure());
const deadline = Date.now() + durationMs;
let seq = 0;

function call() {
  if (Date.now() > deadline) {
    client.close();
    return;
  }
  const n = seq++;
  let backend = '';
  const c = client.check({}, { deadline: Date.now() + 2000, waitForReady: true }, (err) => {
    const line = { seq: n };
    if (err) line.err = err.message;
    else if (backend) line.backend = backend;
    process.stdout.write(JSON.stringify(line) + '\n');
    setTimeout(call, intervalMs);
  });
  c.on('metadata', (md) => {
    const v = md.get('x-backend');
    if (v.length) backend = String(v[0]);
  });
}
call();
