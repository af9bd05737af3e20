#include "cli/app.hpp"

int main(int argc, char** argv) { return dlock::run_main(argc, argv); }
