// SPDX-License-Identifier: Apache-2.0
// No public header of cuscope's core, nor json_line_sink.hpp, includes <functional> or
// <algorithm>: callbacks are held by detail::callback, searches and sorts are written out.
// (<chrono> comes with session.hpp and recorder.hpp, whose members and options are times;
// <iterator> with batch.hpp, for std::input_iterator_tag.) Checked with libstdc++, whose own
// headers that cuscope includes do not bring them; other standard libraries may, so nothing is
// checked there. Compiled by the header check.
#include <cuscope/cuscope.hpp>
#include <cuscope/ipc.hpp>
#include <cuscope/json_line_sink.hpp>
#include <cuscope/recorder.hpp>
#include <cuscope/trace.hpp>

#if defined(_GLIBCXX_FUNCTIONAL) || defined(_GLIBCXX_ALGORITHM)
#  error "a public cuscope header includes <functional> or <algorithm>"
#endif
