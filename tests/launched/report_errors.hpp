#pragma once
// How the launched test programs end: the body's status, or one "rank ..." line per failure kind
// that the test scripts count.
#include <cstdio>
#include <exception>

#include "jobkit/error.hpp"

template <class Body>
int report_errors(Body&& body) {
  try {
    return body();
  } catch (const jobkit::timeout_error& e) {
    std::printf("rank timeout_error: %s\n", e.what());
    return 3;
  } catch (const jobkit::error& e) {
    std::printf("rank error: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::printf("rank exception: %s\n", e.what());
    return 4;
  }
}
