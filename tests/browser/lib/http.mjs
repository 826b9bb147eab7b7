// Plain HTTP requests from Node: no Origin, no Sec-Fetch-* unless a test adds them, and any
// Host header a test wants (node:http sends the given Host instead of the URL's).

import { request } from 'node:http';

/** GET `url` with `headers`; resolves `{status, headers, body}` (body as text). */
export function httpGet(url, headers = {}) {
  return new Promise((resolveReply, reject) => {
    const req = request(url, { method: 'GET', headers, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => { body += chunk; });
      res.on('end', () => resolveReply({ status: res.statusCode, headers: res.headers, body }));
      res.on('error', reject);
    });
    req.setTimeout(30000, () => req.destroy(new Error(`GET ${url} timed out`)));
    req.on('error', reject);
    req.end();
  });
}
