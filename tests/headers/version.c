/* Compiles alone: nvswap/version.h is self-contained. */
#include <nvswap/version.h>
#include <nvswap/version.h> /* and include-guarded */

int main(void)
{
	return 0;
}
