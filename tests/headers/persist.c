/* Compiles alone: nvswap/persist.h is self-contained. */
#include <nvswap/persist.h>
#include <nvswap/persist.h> /* and include-guarded */

int main(void)
{
	return 0;
}
