// markdown.js - a small Markdown renderer for model answers: headings,
// fenced code blocks, inline code, lists (nested by indentation), block
// quotes, rules, bold, italic, strike-through and links. Everything is
// HTML-escaped first; the only tags in the output are the ones made here,
// and links keep only http(s), mailto and relative targets. An unclosed
// code fence (an answer still streaming) renders as code up to the end.

const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export const escapeHtml = (s) => s.replace(/[&<>"']/g, (c) => ESC[c]);

// A link target after escaping: allowed schemes and relative paths only.
function safeUrl(url) {
  const u = url.trim();
  if (/^(https?:|mailto:)/i.test(u) || /^[/#?.]/.test(u)) return u;
  if (!/^[a-z][a-z0-9+.-]*:/i.test(u)) return u;   // "page.html": relative
  return null;                                     // javascript:, data:, ...
}

// Bold, italic, strike-through and links on escaped text without code spans.
function emphasis(s) {
  s = s.replace(/\[([^\]\n]+)\]\(([^()\s]+)\)/g, (m, text, url) => {
    const u = safeUrl(url);
    return u ? `<a href="${u}" target="_blank" rel="noopener noreferrer">${text}</a>` : text;
  });
  s = s.replace(/(^|[\s(])(https?:\/\/[^\s<)]+[^\s<).,;:!?'"])/g,
    (m, pre, url) => `${pre}<a href="${url}" target="_blank" rel="noopener noreferrer">${url}</a>`);
  s = s.replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, '<strong>$1</strong>');
  s = s.replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, '$1<strong>$2</strong>');
  s = s.replace(/(^|[^*\w])\*(?=[^\s*])([^*\n]*?[^\s*])\*(?!\*)/g, '$1<em>$2</em>');
  s = s.replace(/(^|[^\w])_(?=[^\s_])([^_\n]*?[^\s_])_(?!\w)/g, '$1<em>$2</em>');
  s = s.replace(/~~(?=\S)([^~\n]*?\S)~~/g, '<del>$1</del>');
  return s;
}

// Inline markup of one block's raw text: code spans first (their content is
// literal), then emphasis on the rest.
export function inline(raw) {
  let out = '';
  let i = 0;
  while (i < raw.length) {
    const tick = raw.indexOf('`', i);
    if (tick < 0) { out += emphasis(escapeHtml(raw.slice(i))); break; }
    let n = 1;
    while (raw[tick + n] === '`') n++;
    const fence = '`'.repeat(n);
    const close = raw.indexOf(fence, tick + n);
    if (close < 0) { out += emphasis(escapeHtml(raw.slice(i))); break; }
    out += emphasis(escapeHtml(raw.slice(i, tick)));
    let code = raw.slice(tick + n, close);
    if (/^ .* $/.test(code)) code = code.slice(1, -1);
    out += `<code>${escapeHtml(code)}</code>`;
    i = close + n;
  }
  return out;
}

const RE_FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
const RE_HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RE_RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const RE_ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const RE_QUOTE = /^ {0,3}> ?(.*)$/;

// A list starting at lines[i]: [html, next index]. Items are nested by
// indentation; an item's continuation lines join its text.
function list(lines, i) {
  const first = RE_ITEM.exec(lines[i]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const start = ordered ? parseInt(first[2], 10) : 1;
  let html = ordered ? (start !== 1 ? `<ol start="${start}">` : '<ol>') : '<ul>';
  while (i < lines.length) {
    const m = RE_ITEM.exec(lines[i]);
    if (!m || m[1].length < indent || /\d/.test(m[2]) !== ordered) break;
    if (m[1].length > indent) break;   // handled as a nested list below
    let text = m[3];
    i++;
    let nested = '';
    while (i < lines.length && lines[i].trim() !== '') {
      const sub = RE_ITEM.exec(lines[i]);
      if (sub && sub[1].length > indent) {
        const [h, j] = list(lines, i);
        nested += h;
        i = j;
        continue;
      }
      if (sub || RE_FENCE.test(lines[i]) || RE_HEADING.test(lines[i])) break;
      text += '\n' + lines[i].trim();
      i++;
    }
    html += `<li>${inline(text)}${nested}</li>`;
    // a blank line between items of the same list keeps the list going
    if (i + 1 < lines.length && lines[i] !== undefined && lines[i].trim() === '') {
      const next = RE_ITEM.exec(lines[i + 1]);
      if (next && next[1].length === indent && /\d/.test(next[2]) === ordered) i++;
    }
  }
  return [html + (ordered ? '</ol>' : '</ul>'), i];
}

export function renderMarkdown(src) {
  const lines = src.replace(/\r\n?/g, '\n').split('\n');
  let html = '';
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (line.trim() === '') { i++; continue; }
    let m;
    if ((m = RE_FENCE.exec(line))) {
      const fence = m[1];
      const lang = m[2];
      const body = [];
      i++;
      const close = new RegExp(`^ {0,3}\\${fence[0]}{${fence.length},}\\s*$`);
      while (i < lines.length && !close.test(lines[i])) {
        body.push(lines[i]);
        i++;
      }
      i++;   // the closing fence (or the end)
      const cls = lang ? ` class="language-${escapeHtml(lang)}"` : '';
      html += `<pre><code${cls}>${escapeHtml(body.join('\n'))}</code></pre>`;
      continue;
    }
    if ((m = RE_HEADING.exec(line))) {
      const level = m[1].length;
      html += `<h${level}>${inline(m[2])}</h${level}>`;
      i++;
      continue;
    }
    if (RE_RULE.test(line)) {
      html += '<hr>';
      i++;
      continue;
    }
    if (RE_ITEM.test(line)) {
      const [h, j] = list(lines, i);
      html += h;
      i = j;
      continue;
    }
    if (RE_QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && (m = RE_QUOTE.exec(lines[i]))) {
        body.push(m[1]);
        i++;
      }
      html += `<blockquote>${renderMarkdown(body.join('\n'))}</blockquote>`;
      continue;
    }
    // a paragraph: up to a blank line or the start of another block
    const para = [line];
    i++;
    while (i < lines.length && lines[i].trim() !== '' && !RE_FENCE.test(lines[i]) &&
           !RE_HEADING.test(lines[i]) && !RE_QUOTE.test(lines[i]) && !RE_RULE.test(lines[i]) &&
           !RE_ITEM.test(lines[i])) {
      para.push(lines[i]);
      i++;
    }
    html += `<p>${inline(para.join('\n')).replace(/\n/g, '<br>')}</p>`;
  }
  return html;
}
