// "Copy reference" (templates/refs.html), in the sources panel and the Papers tab: one capturing listener on
// the document puts the button's data-ref (text, set by the server) on the clipboard. navigator.clipboard
// needs a secure context (https or localhost); elsewhere a hidden textarea and execCommand('copy') do it.
if (window.__rpCopyRef) document.removeEventListener('click', window.__rpCopyRef, true);
window.__rpCopyRef = async (ev) => {
  const b = ev.target && ev.target.closest ? ev.target.closest('button.rp-copy-ref') : null;
  if (!b) return;
  ev.preventDefault();
  ev.stopPropagation();
  const text = b.getAttribute('data-ref') || '';
  let ok = false;
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      ok = true;
    }
  } catch (e) { ok = false; }
  if (!ok) {
    const ta = document.createElement('textarea');
    ta.value = text;
    ta.setAttribute('readonly', '');
    ta.className = 'rp-copy-buffer';
    ta.style.cssText = 'position:fixed;top:0;left:-9999px;opacity:0';
    document.body.appendChild(ta);
    ta.select();
    try { ok = document.execCommand('copy'); } catch (e) { ok = false; }
    ta.remove();
  }
  if (!b.dataset.label) b.dataset.label = b.textContent;
  b.textContent = ok ? 'Copied ✓' : 'Copy failed';
  clearTimeout(b.__rpTimer);
  b.__rpTimer = setTimeout(() => { b.textContent = b.dataset.label; }, 2000);
};
document.addEventListener('click', window.__rpCopyRef, true);
