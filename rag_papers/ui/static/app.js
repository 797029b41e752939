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
};
document.addEventListener('click', window.__rpCite, true);
watch('value', () => {
  // Keep the opened paper in view inside the panel (the first one: show the panel's heading too).
  const box = element.closest('.html-container') || element.parentElement;
  const cards = element.querySelectorAll('.rp-src');
  const s = element.querySelector('.rp-src.selected');
  if (!box) return;
  if (!s || s === cards[0]) { box.scrollTop = 0; return; }
  box.scrollTop += s.getBoundingClientRect().top - box.getBoundingClientRect().top - 8;
});
