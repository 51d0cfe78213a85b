// The store's outages as the API's errors, for the layers above services (the gateway) that may not import the store.
export { outageAsServiceError } from '../store/errors.js';
