// mcp_server.mjs - a small MCP server (protocol 2025-06-18) for the MCP
// tests, in plain node: over stdio (newline-delimited JSON-RPC) by default,
// over Streamable HTTP with --http PORT (0: any; "PORT n" is printed on
// stdout). Tools: echo {text} -> "echo(NAME): text"; slow -> never answers;
// crash -> the process exits (stdio only); big -> 100000 bytes of text.
// MCP_TEST_LATE_TOOL=1: a tool "late" appears 200 ms after initialization
// (over HTTP: after the client opened its GET stream), announced with
// notifications/tools/list_changed. MCP_TEST_HEADER=V: HTTP requests without
// "X-Test: V" get 401.
import http from 'node:http';
import readline from 'node:readline';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const name = opt('--name', 'test');
const httpPort = opt('--http', null);

const tools = [
  { name: 'echo', description: 'Says the text back', inputSchema: { type: 'object', properties: { text: { type: 'string' } } } },
  { name: 'slow', description: 'Never answers', inputSchema: { type: 'object', properties: {} } },
  { name: 'big', description: 'A lot of text', inputSchema: { type: 'object', properties: {} } },
];
if (httpPort === null) tools.push({ name: 'crash', description: 'Exits the server', inputSchema: { type: 'object', properties: {} } });

const ok = (id, result) => ({ jsonrpc: '2.0', id, result });
const fail = (id, code, message) => ({ jsonrpc: '2.0', id, error: { code, message } });

// One message -> its response (undefined: none now, e.g. a notification or slow).
function handle(msg, send) {
  const { id, method, params } = msg;
  if (method === 'initialize') {
    if (process.env.MCP_TEST_LATE_TOOL === '1' && httpPort === null) {
      setTimeout(() => {
        tools.push({ name: 'late', description: 'Added later', inputSchema: { type: 'object' } });
        send({ jsonrpc: '2.0', method: 'notifications/tools/list_changed' });
      }, 200);
    }
    return ok(id, {
      protocolVersion: '2025-06-18',
      capabilities: { tools: { listChanged: true } },
      serverInfo: { name: `omniserve-test-${name}`, version: '1.0.0' },
    });
  }
  if (method === 'ping') return ok(id, {});
  if (method === 'tools/list') {
    // two pages, to exercise the cursor
    const half = Math.ceil(tools.length / 2);
    if (!params || !params.cursor) return ok(id, { tools: tools.slice(0, half), nextCursor: 'page2' });
    return ok(id, { tools: tools.slice(half) });
  }
  if (method === 'tools/call') {
    const tool = params && params.name;
    const a = (params && params.arguments) || {};
    if (tool === 'echo') return ok(id, { content: [{ type: 'text', text: `echo(${name}): ${a.text ?? ''}` }] });
    if (tool === 'big') return ok(id, { content: [{ type: 'text', text: 'x'.repeat(100000) }] });
    if (tool === 'slow') return undefined;
    if (tool === 'late') return ok(id, { content: [{ type: 'text', text: 'late' }] });
    if (tool === 'crash' && httpPort === null) {
      process.stderr.write(`${name}: crashing on purpose\n`);
      process.exit(3);
    }
    return ok(id, { content: [{ type: 'text', text: `no tool ${tool}` }], isError: true });
  }
  if (id === undefined) return undefined;   // notifications
  return fail(id, -32601, `method not found: ${method}`);
}

if (httpPort === null) {
  const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');
  process.stderr.write(`${name}: stdio MCP test server up\n`);
  const rl = readline.createInterface({ input: process.stdin });
  rl.on('line', (line) => {
    if (!line.trim()) return;
    let msg;
    try { msg = JSON.parse(line); } catch { send(fail(null, -32700, 'parse error')); return; }
    const r = handle(msg, send);
    if (r) send(r);
  });
  rl.on('close', () => process.exit(0));
} else {
  const sessions = new Set();
  const server = http.createServer((req, res) => {
    if (req.url !== '/mcp') { res.writeHead(404).end(); return; }
    // MCP_TEST_HEADER=V: every request must carry "X-Test: V" (the config's headers)
    if (process.env.MCP_TEST_HEADER && req.headers['x-test'] !== process.env.MCP_TEST_HEADER) {
      res.writeHead(401).end('missing X-Test'); return;
    }
    const sid = req.headers['mcp-session-id'];
    if (req.method === 'DELETE') { sessions.delete(sid); res.writeHead(200).end(); return; }
    if (req.method === 'GET') {
      // the stream of server-initiated messages
      if (!sessions.has(sid)) { res.writeHead(sid ? 404 : 400).end(); return; }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(': open\n\n');
      if (process.env.MCP_TEST_LATE_TOOL === '1' && !tools.some((t) => t.name === 'late')) {
        setTimeout(() => {
          tools.push({ name: 'late', description: 'Added later', inputSchema: { type: 'object' } });
          res.write(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/tools/list_changed' })}\n\n`);
        }, 200);
      }
      req.socket.setTimeout(0);
      return;
    }
    if (req.method !== 'POST') { res.writeHead(405).end(); return; }
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      let msg;
      try { msg = JSON.parse(body); } catch { res.writeHead(400).end(); return; }
      if (msg.method === 'initialize') {
        const s = `sess-${Math.random().toString(36).slice(2)}`;
        sessions.add(s);
        res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': s });
        res.end(JSON.stringify(handle(msg, () => {})));
        return;
      }
      if (!sessions.has(sid)) { res.writeHead(sid ? 404 : 400).end(); return; }
      if (msg.method !== 'initialize' && req.headers['mcp-protocol-version'] !== '2025-06-18') {
        res.writeHead(400).end('missing MCP-Protocol-Version'); return;
      }
      const r = handle(msg, () => {});
      if (msg.id === undefined) { res.writeHead(202).end(); return; }
      if (!r) { req.socket.setTimeout(0); return; }   // slow: hold the request open
      if (msg.method === 'tools/call') {
        // answer as a stream: a log notification first, then the response
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'working' } })}\n\n`);
        res.end(`event: message\ndata: ${JSON.stringify(r)}\n\n`);
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(r));
    });
  });
  server.listen(Number(httpPort), '127.0.0.1', () => {
    process.stdout.write(`PORT ${server.address().port}\n`);
  });
}
