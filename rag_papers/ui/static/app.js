// The sources panel's js_on_load (gr.HTML runs it with element, trigger and watch in scope).
// One capturing listener on the document turns a click on any citation link (#cite-E-N, in the chat
// or the panel) into the panel's custom 'cite' event, so citations in older answers still open their paper.
if (window.__rpCite) document.removeEventListener('click', window.__rpCite, true);
window.__rpCite = (ev) => {
  const a = ev.target && ev.target.closest ? ev.target.closest('a[href^="#cite-"]') : null;
  if (!a) return;
  ev.preventDefault();
  ev.stopPropagation();
  trigger('cite', {key: a.getAttribute('href').slice(6)});
  // Bring the opened paper into view (a phone stacks the panel below the chat): once the panel has its new
  // value, and again shortly after, for a click on the paper already open (the value does not change).
  window.__rpCiteClicked = true;
  setTimeout(() => window.__rpReveal && window.__rpReveal(), 400);
};
window.__rpReveal = () => {
  if (!window.__rpCiteClicked) return;
  window.__rpCiteClicked = false;
  const target = document.querySelector('#rp-panel .rp-src.selected') || document.querySelector('#rp-panel');
  if (!target) return;
  const r = target.getBoundingClientRect();
  if (r.top < 0 || r.top > window.innerHeight - 60) target.scrollIntoView({block: 'start', behavior: 'smooth'});
};
document.addEventListener('click', window.__rpCite, true);
watch('value', () => {
  // Keep the opened paper in view inside the panel (the first one: show the panel's heading too).
  const box = element.closest('.html-container') || element.parentElement;
  const cards = element.querySelectorAll('.rp-src');
  const s = element.querySelector('.rp-src.selected');
  if (!box) return;
  if (!s || s === cards[0]) box.scrollTop = 0;
  else box.scrollTop += s.getBoundingClientRect().top - box.getBoundingClientRect().top - 8;
  window.__rpReveal();
});

// A citation's card (title, the passage's first sentence, score) on hover or keyboard focus, instead of a
// native tooltip. Filled with textContent from the panel's store (templates/cards.html, keyed like the link's
// #cite-E-N): corpus text stays text.
if (!window.__rpCard) {
  const card = document.createElement('div');
  card.className = 'rp-hovercard';
  card.id = 'rp-hovercard';
  card.setAttribute('role', 'tooltip');
  card.hidden = true;
  document.body.appendChild(card);
  window.__rpCard = card;
  const store = () => new Map([...document.querySelectorAll('.rp-cite-store span')].map((e) => [e.dataset.key, e]));
  const keyOf = (a) => (a.getAttribute('href') || '').slice(6);
  const entry = (a) => store().get(keyOf(a)) || null;
  const citeOf = (t) => (t && t.closest ? t.closest('a.rp-cite[href^="#cite-"]') : null);
  const show = (a) => {
    const e = entry(a);
    if (!e) return;
    const part = (cls, text) => { const d = document.createElement('div'); d.className = cls; d.textContent = text; return d; };
    card.replaceChildren(
      part('rp-card-title', e.dataset.title || ''),
      part('rp-card-body', e.dataset.body || ''),
      part('rp-card-score', e.dataset.score ? 'score ' + e.dataset.score : ''),
    );
    card.hidden = false;
    const r = a.getBoundingClientRect();
    const w = Math.min(340, window.innerWidth - 16);
    card.style.width = w + 'px';
    card.style.left = Math.max(8, Math.min(r.left, window.innerWidth - w - 8)) + 'px';
    const below = r.bottom + 6, h = card.offsetHeight;
    card.style.top = (below + h < window.innerHeight ? below : Math.max(8, r.top - h - 6)) + 'px';
    a.setAttribute('aria-describedby', 'rp-hovercard');
  };
  const hide = () => { card.hidden = true; };
  document.addEventListener('mouseover', (ev) => { const a = citeOf(ev.target); if (a) show(a); });
  document.addEventListener('mouseout', (ev) => { if (citeOf(ev.target)) hide(); });
  document.addEventListener('focusin', (ev) => { const a = citeOf(ev.target); if (a) show(a); });
  document.addEventListener('focusout', (ev) => { if (citeOf(ev.target)) hide(); });
  document.addEventListener('keydown', (ev) => { if (ev.key === 'Escape') hide(); });
  document.addEventListener('scroll', hide, true);
  // Each citation link's accessible name, "Source N: title" (its text alone is "[N]"), set as links appear.
  let queued = false;
  const name = () => {
    queued = false;
    const known = store();
    for (const a of document.querySelectorAll('#rp-chat a.rp-cite[href^="#cite-"]')) {
      const e = known.get(keyOf(a));
      const label = e ? 'Source ' + e.dataset.n + ': ' + e.dataset.title : '';
      if (label && a.getAttribute('aria-label') !== label) a.setAttribute('aria-label', label);
    }
  };
  // Each message's accessible name: gradio names it "bot's message: " and its raw content (our HTML, with
  // entities); a screen reader should hear the words shown, so the name is the message's own text.
  const who = {user: 'Question: ', bot: 'Answer: '};
  const nameMessages = () => {
    for (const m of document.querySelectorAll('#rp-chat [data-testid="user"], #rp-chat [data-testid="bot"]')) {
      const label = who[m.dataset.testid] + m.innerText.replace(/\s+/g, ' ').trim();
      if (m.getAttribute('aria-label') !== label) m.setAttribute('aria-label', label);
    }
  };
  // Once a frame at most: a streaming answer changes the page many times a second.
  new MutationObserver(() => {
    if (!queued) { queued = true; requestAnimationFrame(() => { name(); nameMessages(); }); }
  }).observe(document.body, {childList: true, subtree: true, characterData: true, attributes: true, attributeFilter: ['aria-label']});
}

// Every upload printed "Method not implemented." (a console warning): gradio's client hands the upload-progress
// bar a stand-in EventSource whose close() only warns (gradio 6.31, client/js/src/utils/stream.ts; the bar calls it
// when the upload is done: gradio-app/gradio#12002, open). That close is a no-op by design there (the stream ends
// with the upload); this one message, word for word, is dropped, every other warning is kept.
if (!window.__rpQuietClose) {
  window.__rpQuietClose = true;
  const warn = console.warn.bind(console);
  console.warn = (...args) => { if (!(args.length === 1 && args[0] === 'Method not implemented.')) warn(...args); };
}
