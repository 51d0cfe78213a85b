/** Kept in step with package.json by a unit test. */
export const SDK_VERSION = '0.1.0';
