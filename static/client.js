// The example client's run form: checks required and number fields before the form goes out
// and names each field it refuses, as the server does (which checks everything again).
(function () {
  const form = document.querySelector('form.run-form');
  if (!form) return;
  const box = document.getElementById('form-errors');
  form.addEventListener('submit', (event) => {
    const problems = [];
    for (const control of form.querySelectorAll('input, select, textarea')) {
      if (!control.name) continue;
      const empty = control.type === 'file' ? control.files.length === 0 : control.value.trim() === '';
      if (control.required && empty) {
        problems.push(`${control.name} is required`);
      } else if (control.type === 'number' && !empty && !control.checkValidity()) {
        problems.push(`${control.name} must be ${control.step === '1' ? 'an integer' : 'a number'}`);
      }
    }
    if (problems.length === 0) return;
    event.preventDefault();
    const list = document.createElement('ul');
    for (const problem of problems) {
      const item = document.createElement('li');
      item.dataset.field = problem.split(' ')[0];
      item.textContent = problem;
      list.append(item);
    }
    box.replaceChildren(Object.assign(document.createElement('p'), { textContent: 'The form needs changes:' }), list);
    box.hidden = false;
  });
})();
