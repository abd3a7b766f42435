// SPDX-License-Identifier: Apache-2.0
// No public header of cuscope's core, nor json_line_sink.hpp, includes <functional>, <algorithm>
// or <iterator>: callbacks are held by detail::callback, searches and sorts are written out, and
// batch.hpp finds std::input_iterator_tag in <string> where the library declares it there.
// (<chrono> comes with session.hpp and recorder.hpp, whose members and options are times.)
// Checked with libstdc++, whose own headers that cuscope includes do not bring them; other
// standard libraries may, so nothing is checked there. Compiled by the header check.
#include <cuscope/cuscope.hpp>
#include <cuscope/ipc.hpp>
#include <cuscope/json_line_sink.hpp>
#include <cuscope/recorder.hpp>
#include <cuscope/trace.hpp>

#if defined(_GLIBCXX_FUNCTIONAL) || defined(_GLIBCXX_ALGORITHM) || defined(_GLIBCXX_ITERATOR)
#  error "a public cuscope header includes <functional>, <algorithm> or <iterator>"
#endif
