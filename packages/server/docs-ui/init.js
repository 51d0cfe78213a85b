// The API reference at /docs: Swagger UI over /openapi.json. "Try it out" sends requests to this
// service with the key given under "Authorize", or the one the console signed in with (kept in this
// tab's session storage, never in a URL).
window.addEventListener('load', () => {
  const key = window.sessionStorage.getItem('sandboxd.apiKey');
  const ui = window.SwaggerUIBundle({
    url: '/openapi.json',
    dom_id: '#reference',
    deepLinking: true,
    filter: true,
    docExpansion: 'list',
    defaultModelsExpandDepth: 0,
    displayRequestDuration: true,
    persistAuthorization: false,
    // Only what /docs serves itself: no external validator badge, no remote resources.
    validatorUrl: null,
    // The schemes exist once the document is loaded.
    onComplete: () => {
      if (key) ui.preauthorizeApiKey('apiKey', key);
    },
  });
  window.ui = ui;
});
