#pragma once

// What libjobkit.so exports. The library is compiled with hidden visibility, inline functions
// hidden too (src/meson.build: gnu_symbol_visibility 'inlineshidden'), so that only what a public
// header marks JOBKIT_API is part of its ABI: the API, its classes (their typeinfo and vtables
// with them, so that jobkit::error and its subclasses are caught across the library's boundary),
// and the few detail:: functions that the public headers' templates and inline functions call in
// the user's code. tests/exported_symbols.py checks the library's dynamic symbols against that.
//
// On ELF the attribute is the same when the library is built and when it is used: a declaration
// seen by a program states the symbol's visibility and nothing else.
#define JOBKIT_API __attribute__((visibility("default")))
