/** Types of bin/compiled-build.js (plain JavaScript: the launcher runs before any TypeScript can). */
export declare const DIST: URL;
export declare const BUILD_STAMP: URL;
/** The compiled CLI module's URL, or undefined when there is no build or a source file is newer than it. */
export declare function compiledCli(): string | undefined;
