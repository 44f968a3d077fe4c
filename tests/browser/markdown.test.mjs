// markdown.test.mjs - the playground's Markdown renderer (src/api/web/markdown.js)
// under node: the blocks and inline marks it knows, and that nothing from
// the model's text becomes markup of its own (HTML, attributes, script URLs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { renderMarkdown as md, inline } from '../../src/api/web/markdown.js';

test('blocks: headings, paragraphs, rules, quotes', () => {
  assert.equal(md('# Title\n\nSome text\nnext line'), '<h1>Title</h1><p>Some text<br>next line</p>');
  assert.equal(md('### Three ###'), '<h3>Three</h3>');
  assert.equal(md('a\n\n---\n\nb'), '<p>a</p><hr><p>b</p>');
  assert.equal(md('> quoted\n> more'), '<blockquote><p>quoted<br>more</p></blockquote>');
  assert.equal(md(''), '');
});

test('code: fenced blocks keep their text, an open fence runs to the end', () => {
  assert.equal(md('```js\nlet a = 1 < 2;\n**not bold**\n```\nafter'),
    '<pre><code class="language-js">let a = 1 &lt; 2;\n**not bold**</code></pre><p>after</p>');
  assert.equal(md('```\nstreaming…'), '<pre><code>streaming…</code></pre>');
  assert.equal(md('~~~~\n```\n~~~~'), '<pre><code>```</code></pre>');
  assert.equal(inline('use `a*b*c` and ``x ` y``'), 'use <code>a*b*c</code> and <code>x ` y</code>');
});

test('lists: bullets, numbers, nesting, continuation lines', () => {
  assert.equal(md('- one\n- two\n  more'), '<ul><li>one</li><li>two\nmore</li></ul>');
  assert.equal(md('1. a\n2. b'), '<ol><li>a</li><li>b</li></ol>');
  assert.equal(md('3. c\n4. d'), '<ol start="3"><li>c</li><li>d</li></ol>');
  assert.equal(md('- a\n  - a1\n  - a2\n- b'),
    '<ul><li>a<ul><li>a1</li><li>a2</li></ul></li><li>b</li></ul>');
  assert.equal(md('- a\n\n- b'), '<ul><li>a</li><li>b</li></ul>');
  assert.equal(md('text\n- item'), '<p>text</p><ul><li>item</li></ul>');
});

test('inline: bold, italic, strike, links', () => {
  assert.equal(inline('**b** *i* __B__ _I_ ~~s~~'),
    '<strong>b</strong> <em>i</em> <strong>B</strong> <em>I</em> <del>s</del>');
  assert.equal(inline('snake_case_name and 2*3*4'), 'snake_case_name and 2*3*4');
  assert.equal(inline('[docs](https://example.com/a?b=1&c=2)'),
    '<a href="https://example.com/a?b=1&amp;c=2" target="_blank" rel="noopener noreferrer">docs</a>');
  assert.equal(inline('see https://example.com/x.'),
    'see <a href="https://example.com/x" target="_blank" rel="noopener noreferrer">https://example.com/x</a>.');
  assert.equal(inline('[rel](/v1/models)'),
    '<a href="/v1/models" target="_blank" rel="noopener noreferrer">rel</a>');
});

test('nothing in the text becomes HTML of its own', () => {
  const evil = [
    '<script>alert(1)</script>',
    '<img src=x onerror=alert(1)>',
    '[x](javascript:alert(1))',
    '[x](JaVaScRiPt:alert(1))',
    '[x](data:text/html,<b>)',
    '[x](https://a.b/"onmouseover="alert(1))',
    '**<b>**',
    '`<i>`',
    '```\n</code></pre><script>x</script>\n```',
    '# <h1>',
    '- <li>',
    '> <div>',
  ];
  for (const s of evil) {
    const html = md(s);
    assert.doesNotMatch(html, /<(script|img|b|i|h1 |div|li )[\s>]/i, `${s} -> ${html}`);
    assert.doesNotMatch(html, /href="(javascript|data):/i, `${s} -> ${html}`);
    assert.doesNotMatch(html, /" on\w+=/i, `${s} -> ${html}`);
  }
  assert.equal(md('[x](javascript:void0)'), '<p>x</p>');
});
